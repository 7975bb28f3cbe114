//! UTC times as the console shows and reads them: `2026-11-29 14:05:09`,
//! and an HTML `datetime-local` field's `2026-11-29T14:05:09` (or without
//! seconds, as browsers send a time on the minute).

use std::time::SystemTime;

/// `time` as `YYYY-MM-DD HH:MM:SS` in UTC.
pub(super) fn utc_text(time: SystemTime) -> String {
    humantime::format_rfc3339_seconds(time)
        .to_string()
        .replace('T', " ")
        .trim_end_matches('Z')
        .to_owned()
}

/// `YYYY-MM-DD`, `T` or a space, and `HH:MM` or `HH:MM:SS`, in UTC.
pub(super) fn parse_utc(text: &str) -> Option<SystemTime> {
    let text = text.trim();
    let on_the_minute = text.len() == "2026-11-29T14:05".len();
    let text = if on_the_minute {
        format!("{text}:00")
    } else {
        text.to_owned()
    };
    humantime::parse_rfc3339_weak(&text).ok()
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    #[test]
    fn known_instants_read_and_print_as_utc() {
        let cases = [
            (0, "1970-01-01 00:00:00"),
            (951_782_400, "2000-02-29 00:00:00"),
            (1_795_962_909, "2026-11-29 14:35:09"),
        ];
        for (seconds, text) in cases {
            let time = UNIX_EPOCH + Duration::from_secs(seconds);
            assert_eq!(utc_text(time), text);
            assert_eq!(parse_utc(text), Some(time));
            assert_eq!(parse_utc(&text.replacen(' ', "T", 1)), Some(time));
        }
        let on_the_minute = UNIX_EPOCH + Duration::from_secs(1_795_962_900);
        assert_eq!(parse_utc("2026-11-29T14:35"), Some(on_the_minute));
    }

    #[test]
    fn malformed_or_impossible_times_are_refused() {
        let bad = [
            "",
            "2026-11-29",
            "2026-02-30 10:00",
            "2026-13-01 00:00",
            "2026-11-29 24:00",
            "2026-11-29 10:00:00:00",
            "x-y-z 1:2",
            "2026-11-29 10:61",
        ];
        for bad in bad {
            assert_eq!(parse_utc(bad), None, "{bad}");
        }
    }
}
