//! The time a verifier checks timestamps against.

use std::time::{SystemTime, UNIX_EPOCH};

/// A source of the current time, injectable for tests.
///
/// Implemented for [`SystemClock`] and for any `Fn() -> SystemTime`.
///
/// ```
/// use std::time::{Duration, SystemTime, UNIX_EPOCH};
/// use hooklatch::verify::Clock;
///
/// let fixed = || UNIX_EPOCH + Duration::from_secs(1_614_265_330);
/// assert_eq!(fixed.now(), UNIX_EPOCH + Duration::from_secs(1_614_265_330));
/// ```
pub trait Clock: Send + Sync + 'static {
    /// The current time.
    fn now(&self) -> SystemTime;
}

/// The operating system's clock. The default.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}

impl<F: Fn() -> SystemTime + Send + Sync + 'static> Clock for F {
    fn now(&self) -> SystemTime {
        self()
    }
}

/// Whole seconds since the Unix epoch, negative before it, saturating.
pub(crate) fn unix_seconds(time: SystemTime) -> i64 {
    match time.duration_since(UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_secs()).unwrap_or(i64::MAX),
        Err(before) => i64::try_from(before.duration().as_secs()).map_or(i64::MIN, |s| -s),
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month = i64::from(month);
    let day_of_year =
        (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The date of a day since 1970-01-01 (the inverse of [`days_from_civil`]).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let days = days + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = u32::try_from(day_of_year - (153 * shifted_month + 2) / 5 + 1).unwrap_or(1);
    let month = u32::try_from(if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    })
    .unwrap_or(1);
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Seconds since the Unix epoch of a strict RFC 3339 date-time:
/// `YYYY-MM-DDTHH:MM:SS`, an optional fraction of 1 to 9 digits, then `Z`
/// or `±HH:MM`; uppercase `T` and `Z`, every field in range. The fraction
/// is signed but not counted. `None` for anything else.
///
/// The strict shape is what keeps a template that puts the timestamp
/// right after the id with nothing between (Twitch's) to one reading: no
/// other split of the signed bytes yields a date-time that parses.
pub(crate) fn parse_rfc3339(text: &[u8]) -> Option<i64> {
    fn number(digits: &[u8]) -> Option<u32> {
        digits.iter().try_fold(0_u32, |sum, digit| {
            digit
                .is_ascii_digit()
                .then(|| sum * 10 + u32::from(digit - b'0'))
        })
    }
    if text.len() < 20 || [text[4], text[7], text[10], text[13], text[16]] != *b"--T::" {
        return None;
    }
    let year = i64::from(number(&text[0..4])?);
    let (month, day) = (number(&text[5..7])?, number(&text[8..10])?);
    let (hour, minute, second) = (
        number(&text[11..13])?,
        number(&text[14..16])?,
        number(&text[17..19])?,
    );
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let month_days = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if !(1..=12).contains(&month)
        || day == 0
        || day > month_days[usize::try_from(month - 1).ok()?]
        || hour > 23
        || minute > 59
        || second > 59
    {
        return None;
    }
    let mut rest = &text[19..];
    if let Some(fraction) = rest.strip_prefix(b".") {
        let digits = fraction.iter().take_while(|b| b.is_ascii_digit()).count();
        if !(1..=9).contains(&digits) {
            return None;
        }
        rest = &fraction[digits..];
    }
    let offset = match rest {
        b"Z" => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let (hours, minutes) = (number(&[*h1, *h2])?, number(&[*m1, *m2])?);
            if hours > 23 || minutes > 59 {
                return None;
            }
            let offset = i64::from(hours * 3600 + minutes * 60);
            if *sign == b'+' { offset } else { -offset }
        }
        _ => return None,
    };
    let seconds =
        days_from_civil(year, month, day) * 86_400 + i64::from(hour * 3600 + minute * 60 + second);
    Some(seconds - offset)
}

/// `time` as RFC 3339 in UTC with nanoseconds, trailing zeros dropped (no
/// fraction at all on a whole second), as Go's `RFC3339Nano` writes it:
/// `2019-11-16T10:11:12.634234626Z`.
///
/// `None` outside the years 0000 to 9999, which RFC 3339 cannot write.
pub(crate) fn rfc3339_nanos(time: SystemTime) -> Option<String> {
    let (seconds, nanos) = match time.duration_since(UNIX_EPOCH) {
        Ok(after) => (
            i64::try_from(after.as_secs()).unwrap_or(i64::MAX),
            after.subsec_nanos(),
        ),
        Err(_) => (unix_seconds(time), 0),
    };
    let (days, of_day) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
    let (year, month, day) = civil_from_days(days);
    if !(0..=9999).contains(&year) {
        return None;
    }
    let mut text = format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60
    );
    if nanos > 0 {
        let fraction = format!("{nanos:09}");
        text.push('.');
        text.push_str(fraction.trim_end_matches('0'));
    }
    text.push('Z');
    Some(text)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn rfc3339_reads_what_go_writes_and_nothing_loose() {
        for (text, seconds) in [
            ("1970-01-01T00:00:00Z", 0),
            ("2019-11-16T10:11:12.123Z", 1_573_899_072),
            ("2019-11-16T10:11:12.634234626Z", 1_573_899_072),
            ("2019-11-16T11:11:12+01:00", 1_573_899_072),
            ("2019-11-16T09:41:12-00:30", 1_573_899_072),
            ("2000-02-29T23:59:59Z", 951_868_799),
            ("1969-12-31T23:59:59Z", -1),
        ] {
            assert_eq!(parse_rfc3339(text.as_bytes()), Some(seconds), "{text}");
        }
        for bad in [
            "2019-11-16T10:11:12",
            "2019-11-16t10:11:12Z",
            "2019-11-16T10:11:12z",
            "2019-11-16 10:11:12Z",
            "2019-11-16T10:11:12.Z",
            "2019-11-16T10:11:12.1234567890Z",
            "2019-11-16T10:11:60Z",
            "2019-02-29T10:11:12Z",
            "2019-13-01T10:11:12Z",
            "2019-11-16T24:00:00Z",
            "2019-11-16T10:11:12+0100",
            "019-11-16T10:11:12Z",
            "2019-11-16T10:11:12.123Z{",
            "e2019-11-16T10:11:12Z",
            "+2019-11-16T10:11:12Z",
            "1573899072",
        ] {
            assert_eq!(parse_rfc3339(bad.as_bytes()), None, "{bad}");
        }
    }

    /// A time RFC 3339 cannot write (before year 0, after 9999) is not
    /// written at all, so a signer never sends what no verifier reads.
    #[test]
    fn rfc3339_writes_only_four_digit_years() {
        let last = UNIX_EPOCH + Duration::from_secs(253_402_300_799);
        assert_eq!(rfc3339_nanos(last).unwrap(), "9999-12-31T23:59:59Z");
        assert_eq!(rfc3339_nanos(last + Duration::from_secs(1)), None);
        assert_eq!(
            rfc3339_nanos(UNIX_EPOCH + Duration::from_secs(72_057_593_836_601_342)),
            None
        );
        let before_year_0 = UNIX_EPOCH - Duration::from_secs(62_167_219_201);
        assert_eq!(rfc3339_nanos(before_year_0), None);
    }

    #[test]
    fn rfc3339_written_with_nanoseconds_reads_back() {
        let at = UNIX_EPOCH + Duration::new(1_573_899_072, 634_234_626);
        assert_eq!(rfc3339_nanos(at).unwrap(), "2019-11-16T10:11:12.634234626Z");
        let at = UNIX_EPOCH + Duration::new(1_573_899_072, 120_000_000);
        assert_eq!(rfc3339_nanos(at).unwrap(), "2019-11-16T10:11:12.12Z");
        assert_eq!(
            rfc3339_nanos(UNIX_EPOCH + Duration::from_secs(951_868_799)).unwrap(),
            "2000-02-29T23:59:59Z"
        );
        for seconds in (0..4_102_444_800_u64).step_by(7_654_321) {
            let at = UNIX_EPOCH + Duration::new(seconds, 5);
            let text = rfc3339_nanos(at).unwrap();
            assert_eq!(
                parse_rfc3339(text.as_bytes()),
                Some(seconds as i64),
                "{text}"
            );
        }
    }
}
