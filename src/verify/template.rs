//! The signed-content template: which bytes, in which order, a signature
//! covers, such as `{id}.{timestamp}.{body}`.

use std::borrow::Cow;

use super::error::ConfigError;

/// One piece of the signed content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Segment {
    Literal(Cow<'static, str>),
    Id,
    Timestamp,
    Body,
}

/// The pieces of the signed content; `{body}` appears exactly once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Template(Cow<'static, [Segment]>);

impl Template {
    /// The ASCII characters of the literals right before or after an
    /// `{id}`, as a mask (bit `c` for character `c`): an id that holds one
    /// could split the signed content two ways (`{id}.{timestamp}` reads
    /// `a.1.2` as id `a.1` or id `a`). Ids are visible ASCII, so no other
    /// character matters.
    pub(super) fn id_border_mask(&self) -> u128 {
        let mut mask = 0;
        for (at, segment) in self.0.iter().enumerate() {
            if *segment != Segment::Id {
                continue;
            }
            let neighbours = [at.checked_sub(1), Some(at + 1)]
                .into_iter()
                .flatten()
                .filter_map(|next| self.0.get(next));
            for neighbour in neighbours {
                if let Segment::Literal(literal) = neighbour {
                    for byte in literal.bytes().filter(u8::is_ascii) {
                        mask |= 1u128 << byte;
                    }
                }
            }
        }
        mask
    }

    /// Whether `{timestamp}` follows `{id}` with nothing between.
    pub(super) fn id_touches_timestamp(&self) -> bool {
        self.0
            .windows(2)
            .any(|pair| pair == [Segment::Id, Segment::Timestamp])
    }

    /// `{body}`: GitHub, Shopify, and custom schemes by default.
    pub(super) const BODY: Self = Self(Cow::Borrowed(&[Segment::Body]));

    /// `{id}.{timestamp}.{body}`: Standard Webhooks and Svix.
    pub(super) const ID_DOT_TIMESTAMP_DOT_BODY: Self = Self(Cow::Borrowed(&[
        Segment::Id,
        Segment::Literal(Cow::Borrowed(".")),
        Segment::Timestamp,
        Segment::Literal(Cow::Borrowed(".")),
        Segment::Body,
    ]));

    /// `{timestamp}.{body}`: Stripe.
    pub(super) const TIMESTAMP_DOT_BODY: Self = Self(Cow::Borrowed(&[
        Segment::Timestamp,
        Segment::Literal(Cow::Borrowed(".")),
        Segment::Body,
    ]));

    /// `{timestamp}:{body}`: Paddle.
    pub(super) const TIMESTAMP_COLON_BODY: Self = Self(Cow::Borrowed(&[
        Segment::Timestamp,
        Segment::Literal(Cow::Borrowed(":")),
        Segment::Body,
    ]));

    /// `{timestamp},{body}`: Convoy.
    pub(super) const TIMESTAMP_COMMA_BODY: Self = Self(Cow::Borrowed(&[
        Segment::Timestamp,
        Segment::Literal(Cow::Borrowed(",")),
        Segment::Body,
    ]));

    /// `{timestamp}{body}`: Discord.
    pub(super) const TIMESTAMP_BODY: Self =
        Self(Cow::Borrowed(&[Segment::Timestamp, Segment::Body]));

    /// `{id}{timestamp}{body}`: Twitch.
    pub(super) const ID_TIMESTAMP_BODY: Self = Self(Cow::Borrowed(&[
        Segment::Id,
        Segment::Timestamp,
        Segment::Body,
    ]));

    /// `v0:{timestamp}:{body}`: Slack and Zoom.
    pub(super) const SLACK: Self = Self(Cow::Borrowed(&[
        Segment::Literal(Cow::Borrowed("v0:")),
        Segment::Timestamp,
        Segment::Literal(Cow::Borrowed(":")),
        Segment::Body,
    ]));

    /// Parses `{id}`, `{timestamp}` and `{body}` placeholders among literal
    /// text; `{body}` must appear exactly once.
    pub(super) fn parse(template: &str) -> Result<Self, ConfigError> {
        let mut segments = Vec::new();
        let mut rest = template;
        while !rest.is_empty() {
            let (literal, after) = match rest.find('{') {
                Some(at) => rest.split_at(at),
                None => (rest, ""),
            };
            if literal.contains('}') {
                return Err(ConfigError::InvalidTemplate("unmatched `}`"));
            }
            if !literal.is_empty() {
                segments.push(Segment::Literal(Cow::Owned(literal.to_owned())));
            }
            if after.is_empty() {
                break;
            }
            let close = after
                .find('}')
                .ok_or(ConfigError::InvalidTemplate("unclosed `{`"))?;
            segments.push(match &after[1..close] {
                "id" => Segment::Id,
                "timestamp" => Segment::Timestamp,
                "body" => Segment::Body,
                _ => {
                    return Err(ConfigError::InvalidTemplate(
                        "placeholders are `{id}`, `{timestamp}` and `{body}`",
                    ));
                }
            });
            rest = &after[close + 1..];
        }
        if segments.iter().filter(|s| **s == Segment::Body).count() != 1 {
            return Err(ConfigError::InvalidTemplate(
                "`{body}` must appear exactly once",
            ));
        }
        Ok(Self(Cow::Owned(segments)))
    }

    /// Whether the template has `segment`.
    pub(super) fn signs(&self, segment: &Segment) -> bool {
        self.0.contains(segment)
    }

    /// Feeds the signed content, piece by piece, to `sink`.
    pub(super) fn feed(
        &self,
        id: Option<&[u8]>,
        timestamp: Option<&[u8]>,
        body: &[u8],
        mut sink: impl FnMut(&[u8]),
    ) {
        for segment in self.0.iter() {
            match segment {
                Segment::Literal(text) => sink(text.as_bytes()),
                Segment::Id => sink(id.unwrap_or_default()),
                Segment::Timestamp => sink(timestamp.unwrap_or_default()),
                Segment::Body => sink(body),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn content(template: &Template) -> Vec<u8> {
        let mut whole = Vec::new();
        template.feed(Some(b"msg_1"), Some(b"42"), b"{}", |piece| {
            whole.extend_from_slice(piece)
        });
        whole
    }

    #[test]
    fn parsed_templates_sign_what_the_providers_sign() {
        for (text, constant) in [
            ("{body}", Template::BODY),
            (
                "{id}.{timestamp}.{body}",
                Template::ID_DOT_TIMESTAMP_DOT_BODY,
            ),
            ("{timestamp}.{body}", Template::TIMESTAMP_DOT_BODY),
            ("v0:{timestamp}:{body}", Template::SLACK),
            ("{timestamp}:{body}", Template::TIMESTAMP_COLON_BODY),
            ("{timestamp},{body}", Template::TIMESTAMP_COMMA_BODY),
            ("{id}{timestamp}{body}", Template::ID_TIMESTAMP_BODY),
            ("{timestamp}{body}", Template::TIMESTAMP_BODY),
        ] {
            let parsed = Template::parse(text).unwrap();
            assert_eq!(parsed, constant, "{text}");
            assert_eq!(content(&parsed), content(&constant), "{text}");
        }
        assert_eq!(
            content(&Template::ID_DOT_TIMESTAMP_DOT_BODY),
            b"msg_1.42.{}"
        );
    }
}
