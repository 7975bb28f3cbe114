//! [`EventMeta`]: what a provider said about an event beyond its body,
//! kept with it in the inbox.

/// What a provider said about an event beyond its body: its type, its own
/// delivery id, how often it retried, and the headers the receiver kept.
/// Kept with the event in the inbox, so workers see it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EventMeta {
    /// The event's type, such as `push` or `invoice.paid`.
    pub event_type: Option<String>,
    /// The provider's id for the delivery, apart from the signed id.
    pub delivery_id: Option<String>,
    /// How many times the provider said it retried.
    pub retry: Option<u32>,
    /// Headers the receiver kept, lowercase name first.
    pub headers: Vec<(String, String)>,
}

impl EventMeta {
    /// Metadata with a type, for building events by hand.
    pub fn with_type(event_type: &str) -> Self {
        Self {
            event_type: Some(event_type.to_owned()),
            ..Self::default()
        }
    }

    /// Whether there is nothing to keep.
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }

    /// The JSON text a store keeps, or `None` when there is nothing.
    /// Written straight from the fields (no `serde_json::Value` tree): it
    /// runs once per accepted request.
    #[cfg(any(feature = "sqlite", feature = "postgres", feature = "redis"))]
    pub(crate) fn to_text(&self) -> Option<String> {
        /// The stored form: headers as `[name, value]` pairs.
        #[derive(serde::Serialize)]
        struct Stored<'a> {
            #[serde(rename = "type")]
            event_type: Option<&'a str>,
            delivery_id: Option<&'a str>,
            retry: Option<u32>,
            headers: &'a [(String, String)],
        }
        if self.is_empty() {
            return None;
        }
        let stored = Stored {
            event_type: self.event_type.as_deref(),
            delivery_id: self.delivery_id.as_deref(),
            retry: self.retry,
            headers: &self.headers,
        };
        // Serializing strings and numbers into a `String` cannot fail.
        serde_json::to_string(&stored).ok()
    }

    /// Reads what [`to_text`](Self::to_text) wrote; anything unreadable is
    /// no metadata, never an error that would stop a worker.
    #[cfg(any(feature = "sqlite", feature = "postgres", feature = "redis"))]
    pub(crate) fn from_text(text: Option<&str>) -> Self {
        let Some(value) = text
            .filter(|text| !text.is_empty())
            .and_then(|text| serde_json::from_str::<serde_json::Value>(text).ok())
        else {
            return Self::default();
        };
        let text = |name: &str| value.get(name).and_then(|v| v.as_str()).map(str::to_owned);
        Self {
            event_type: text("type"),
            delivery_id: text("delivery_id"),
            retry: value
                .get("retry")
                .and_then(serde_json::Value::as_u64)
                .and_then(|n| u32::try_from(n).ok()),
            headers: value
                .get("headers")
                .and_then(serde_json::Value::as_array)
                .map(|pairs| {
                    pairs
                        .iter()
                        .filter_map(|pair| {
                            Some((
                                pair.get(0)?.as_str()?.to_owned(),
                                pair.get(1)?.as_str()?.to_owned(),
                            ))
                        })
                        .collect()
                })
                .unwrap_or_default(),
        }
    }
}

#[cfg(all(test, any(feature = "sqlite", feature = "postgres", feature = "redis")))]
mod tests {
    use super::EventMeta;

    #[test]
    fn metadata_survives_its_text_and_bad_text_is_none() {
        let meta = EventMeta {
            event_type: Some("push".into()),
            delivery_id: Some("72d3162e".into()),
            retry: Some(2),
            headers: vec![("x-github-hook-id".into(), "292\"430182".into())],
        };
        assert_eq!(EventMeta::from_text(meta.to_text().as_deref()), meta);
        // The stored form, which rows written before read back as well.
        let stored: serde_json::Value = serde_json::from_str(&meta.to_text().unwrap()).unwrap();
        assert_eq!(
            stored,
            serde_json::json!({
                "type": "push",
                "delivery_id": "72d3162e",
                "retry": 2,
                "headers": [["x-github-hook-id", "292\"430182"]],
            })
        );
        let typed_only = EventMeta::with_type("ping").to_text().unwrap();
        assert_eq!(
            typed_only,
            r#"{"type":"ping","delivery_id":null,"retry":null,"headers":[]}"#
        );
        assert_eq!(EventMeta::default().to_text(), None);
        assert_eq!(
            EventMeta::from_text(Some("{not json")),
            EventMeta::default()
        );
        assert_eq!(EventMeta::from_text(None), EventMeta::default());
    }
}
