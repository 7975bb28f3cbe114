//! UTC times as the console shows and reads them: `2026-11-29 14:05:09`,
//! and an HTML `datetime-local` field's `2026-11-29T14:05` or with seconds.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

const DAY: i64 = 86_400;

/// `time` as `YYYY-MM-DD HH:MM:SS` in UTC.
pub(super) fn utc_text(time: SystemTime) -> String {
    let seconds = match time.duration_since(UNIX_EPOCH) {
        Ok(since) => i64::try_from(since.as_secs()).unwrap_or(i64::MAX),
        Err(before) => -i64::try_from(before.duration().as_secs()).unwrap_or(i64::MAX),
    };
    let (days, in_day) = (seconds.div_euclid(DAY), seconds.rem_euclid(DAY));
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        in_day / 3600,
        in_day % 3600 / 60,
        in_day % 60
    )
}

/// `YYYY-MM-DD`, then `T` or a space and `HH:MM` or `HH:MM:SS`, in UTC.
pub(super) fn parse_utc(text: &str) -> Option<SystemTime> {
    let text = text.trim();
    let (date, time) = text.split_once(['T', ' '])?;
    let mut date = date.splitn(3, '-').map(str::parse::<i64>);
    let (year, month, day) = (date.next()?.ok()?, date.next()?.ok()?, date.next()?.ok()?);
    let mut time = time.split(':').map(str::parse::<i64>);
    let (hour, minute) = (time.next()?.ok()?, time.next()?.ok()?);
    let second = time.next().transpose().ok()?.unwrap_or(0);
    let in_range = (1..=12).contains(&month)
        && (1..=31).contains(&day)
        && (0..24).contains(&hour)
        && (0..60).contains(&minute)
        && (0..60).contains(&second);
    if !in_range
        || time.next().is_some()
        || civil_from_days(days_from_civil(year, month, day)) != (year, month, day)
    {
        return None;
    }
    let seconds = days_from_civil(year, month, day) * DAY + hour * 3600 + minute * 60 + second;
    let magnitude = Duration::from_secs(seconds.unsigned_abs());
    if seconds >= 0 {
        UNIX_EPOCH.checked_add(magnitude)
    } else {
        UNIX_EPOCH.checked_sub(magnitude)
    }
}

// Howard Hinnant's days-from-civil and its inverse, for the proleptic
// Gregorian calendar.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * (month + if month > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let days = days + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
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
        let minutes = UNIX_EPOCH + Duration::from_secs(1_795_962_900);
        assert_eq!(parse_utc("2026-11-29T14:35"), Some(minutes));
    }

    #[test]
    fn malformed_or_impossible_times_are_refused() {
        for bad in [
            "",
            "2026-11-29",
            "2026-02-30 10:00",
            "2026-13-01 00:00",
            "2026-11-29 24:00",
            "2026-11-29 10:00:00:00",
            "x-y-z 1:2",
            "2026-11-29 10:61",
        ] {
            assert_eq!(parse_utc(bad), None, "{bad}");
        }
    }
}
