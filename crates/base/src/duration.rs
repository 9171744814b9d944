//! Durations the way the kubelet writes them, and the rule that turns a
//! credential's expiry into the response's `cacheDuration`.
//!
//! The kubelet decodes `cacheDuration` with Go's `time.ParseDuration`: a JSON
//! number, an empty string or a unit like `d` makes it throw the whole
//! response away. We therefore only ever emit whole seconds in Go's own
//! `Duration.String()` form (`"0s"`, `"59s"`, `"47m12s"`, `"1h0m0s"`).

use std::time::Duration;

use crate::error::{Error, Result, quote};

/// Below this much remaining lifetime a credential is handed out once but
/// not cached by the kubelet (`"0s"`): a cache entry that dies within the
/// next pull's latency only causes a failed pull.
const MIN_CACHEABLE_LIFETIME: Duration = Duration::from_secs(60);

/// The kubelet may keep a credential for this fraction of the lifetime that
/// remains when we answer, leaving the last fifth as a safety margin for
/// clock skew between node and cloud and for pulls that start just before the
/// cache entry ends.
const CACHE_FRACTION_PERCENT: u64 = 80;

/// `cacheDuration` for a credential that expires at `expires_at` (Unix
/// seconds), seen at `now`: 80 % of what remains, at most `max`, and zero when
/// less than [`MIN_CACHEABLE_LIFETIME`] remains or the credential already
/// expired.
pub fn cache_duration(now: i64, expires_at: i64, max: Duration) -> Duration {
    let remaining = expires_at.saturating_sub(now);
    let Ok(remaining) = u64::try_from(remaining) else {
        return Duration::ZERO;
    };
    if remaining < MIN_CACHEABLE_LIFETIME.as_secs() {
        return Duration::ZERO;
    }
    let share = remaining.saturating_mul(CACHE_FRACTION_PERCENT) / 100;
    Duration::from_secs(share).min(Duration::from_secs(max.as_secs()))
}

/// Formats whole seconds as Go's `time.Duration.String()` does.
pub fn format_go(d: Duration) -> String {
    let total = d.as_secs();
    let (h, m, s) = (total / 3600, (total % 3600) / 60, total % 60);
    if h > 0 {
        format!("{h}h{m}m{s}s")
    } else if m > 0 {
        format!("{m}m{s}s")
    } else {
        format!("{s}s")
    }
}

/// Go's `time.ParseDuration`, in seconds: an optional sign, then decimal
/// numbers each followed by a unit (`ns`, `us`/`µs`, `ms`, `s`, `m`, `h`);
/// a bare `0` is accepted, no space anywhere. `None` for anything Go
/// refuses, including what overflows Go's `int64` nanoseconds (about 292
/// years). The kubelet reads its config's durations with this function, so
/// `check-config` judges them with it too.
pub fn parse_go(text: &str) -> Option<f64> {
    let (negative, mut rest) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    if rest == "0" {
        return Some(0.0);
    }
    if rest.is_empty() {
        return None;
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, tail) = rest.split_at(number_len);
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return None;
        }
        let value: f64 = number.parse().ok()?;
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let seconds = match unit {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        total += value * seconds;
        rest = tail;
    }
    if !total.is_finite() || total > 9.2e9 {
        return None;
    }
    Some(if negative { -total } else { total })
}

/// Parses a duration given to this plugin (a flag, a `WICP_*` variable),
/// written like the kubelet's own (`45s`, `10m`, `1h`, `1h30m`, `1.5h`,
/// `500ms`), with [`parse_go`]. Negative durations and anything beyond a
/// year are refused: no setting of ours means either.
pub fn parse(text: &str) -> Result<Duration> {
    const YEAR: f64 = 366.0 * 24.0 * 3600.0;
    parse_go(text.trim())
        .filter(|secs| (0.0..=YEAR).contains(secs) && !text.trim().starts_with('-'))
        .map(Duration::from_secs_f64)
        .ok_or_else(|| {
            Error::config(format!("invalid duration {}", quote(text)))
                .fix("write it like the kubelet does, e.g. 45s, 10m, 1h or 1h30m")
        })
}

/// Formats Unix seconds as an RFC 3339 UTC timestamp, for messages.
pub fn format_unix(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, mo, d) = civil_from_days(days);
    format!(
        "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Parses an RFC 3339 timestamp (`2026-07-14T12:34:56Z`,
/// `2026-07-14T12:34:56.123456789Z`, `2026-07-14T14:34:56+02:00`) to Unix
/// seconds, dropping fractions. Strict: every field has its fixed width and
/// range, the day must exist in its month, and the offset is required, so a
/// garbled upstream expiry is refused instead of guessed. A leap second
/// (`:60`) is refused, as Go's `time.Parse` does.
pub fn parse_rfc3339(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    let digits = |from: usize, len: usize| -> Option<i64> {
        let part = b.get(from..from + len)?;
        part.iter().try_fold(0i64, |n, c| {
            c.is_ascii_digit().then(|| n * 10 + i64::from(c - b'0'))
        })
    };
    let at = |i: usize, c: u8| b.get(i) == Some(&c);
    if !(at(4, b'-') && at(7, b'-') && at(13, b':') && at(16, b':')) {
        return None;
    }
    if !(at(10, b'T') || at(10, b't')) {
        return None;
    }
    let (year, month, day) = (digits(0, 4)?, digits(5, 2)?, digits(8, 2)?);
    let (hour, minute, second) = (digits(11, 2)?, digits(14, 2)?, digits(17, 2)?);
    if !(1..=12).contains(&month)
        || day < 1
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 59
    {
        return None;
    }
    let mut i = 19;
    if at(i, b'.') {
        let fraction = b
            .get(i + 1..)?
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count();
        if fraction == 0 {
            return None;
        }
        i += 1 + fraction;
    }
    let offset = match b.get(i..)? {
        b"Z" | b"z" => 0,
        [sign @ (b'+' | b'-'), _, _, b':', _, _] => {
            let (h, m) = (digits(i + 1, 2)?, digits(i + 4, 2)?);
            if h > 23 || m > 59 {
                return None;
            }
            let secs = h * 3600 + m * 60;
            if *sign == b'+' { secs } else { -secs }
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    Some(days * 86_400 + hour * 3600 + minute * 60 + second - offset)
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// (year, month, day) to days since 1970-01-01: the inverse of
/// [`civil_from_days`], after the same public-domain algorithm.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Days since 1970-01-01 to (year, month, day), after Howard Hinnant's
/// public-domain `civil_from_days`.
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Seconds since the Unix epoch, now.
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_format_matches_time_duration_string() {
        for (secs, want) in [
            (0, "0s"),
            (1, "1s"),
            (59, "59s"),
            (60, "1m0s"),
            (2832, "47m12s"),
            (3600, "1h0m0s"),
            (3661, "1h1m1s"),
            (43200, "12h0m0s"),
        ] {
            assert_eq!(format_go(Duration::from_secs(secs)), want);
        }
    }

    #[test]
    fn parses_kubelet_style_durations() {
        for (text, secs) in [
            ("45s", 45.0),
            ("10m", 600.0),
            ("1h", 3600.0),
            ("1h30m", 5400.0),
            ("1.5h", 5400.0),
            ("500ms", 0.5),
            ("0", 0.0),
            ("0s", 0.0),
        ] {
            assert_eq!(parse(text).unwrap().as_secs_f64(), secs, "{text}");
        }
        for bad in ["", "5", "1d", "-5m", "h", "1x", "1.2.3s", ".s", "99999999h"] {
            assert!(parse(bad).is_err(), "{bad} should be refused");
        }
    }

    #[test]
    fn cache_duration_rule() {
        let hour = Duration::from_secs(3600);
        // 80 % of an hour is 48 minutes.
        assert_eq!(cache_duration(1000, 1000 + 3600, hour).as_secs(), 2880);
        // Capped by the maximum.
        assert_eq!(
            cache_duration(0, 12 * 3600, hour),
            Duration::from_secs(3600)
        );
        // Nearly expired, expired, and long expired: do not cache.
        assert_eq!(cache_duration(0, 59, hour), Duration::ZERO);
        assert_eq!(cache_duration(100, 100, hour), Duration::ZERO);
        assert_eq!(cache_duration(i64::MAX, i64::MIN, hour), Duration::ZERO);
        // Exactly at the threshold it is cached.
        assert_eq!(cache_duration(0, 60, hour).as_secs(), 48);
    }

    #[test]
    fn rfc3339() {
        assert_eq!(format_unix(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_unix(1_700_077_413), "2023-11-15T19:43:33Z");
        assert_eq!(format_unix(951_782_400), "2000-02-29T00:00:00Z");
    }

    #[test]
    fn parses_rfc3339() {
        for (text, secs) in [
            ("1970-01-01T00:00:00Z", 0),
            ("2023-11-15T19:43:33Z", 1_700_077_413),
            ("2000-02-29T00:00:00Z", 951_782_400),
            ("2023-11-15T19:43:33.999999999Z", 1_700_077_413),
            ("2023-11-15T19:43:33.5z", 1_700_077_413),
            ("2023-11-15t21:43:33+02:00", 1_700_077_413),
            ("2023-11-15T14:13:33-05:30", 1_700_077_413),
            ("1969-12-31T23:59:59Z", -1),
            ("2400-02-29T00:00:00Z", 13_574_563_200),
        ] {
            assert_eq!(parse_rfc3339(text), Some(secs), "{text}");
        }
        for bad in [
            "",
            "2023-11-15",
            "2023-11-15T19:43:33",
            "2023-11-15 19:43:33Z",
            "2023-11-15T19:43Z",
            "2023-13-15T19:43:33Z",
            "2023-02-29T00:00:00Z",
            "1900-02-29T00:00:00Z",
            "2023-04-31T00:00:00Z",
            "2023-11-00T00:00:00Z",
            "2023-11-15T24:00:00Z",
            "2023-11-15T19:60:00Z",
            "2023-11-15T19:43:60Z",
            "2023-11-15T19:43:33.Z",
            "2023-11-15T19:43:33+0200",
            "2023-11-15T19:43:33+24:00",
            "2023-11-15T19:43:33Z ",
            "+2023-11-15T19:43:33Z",
            "2023-1a-15T19:43:33Z",
            "2023-11-15T19:43:33.12x",
            "１９７０-01-01T00:00:00Z",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad:?} should be refused");
        }
    }

    #[test]
    fn rfc3339_round_trips_with_format_unix() {
        for secs in [
            0,
            59,
            86_399,
            951_782_400,
            1_700_077_413,
            4_102_444_800,
            -86_401,
        ] {
            assert_eq!(parse_rfc3339(&format_unix(secs)), Some(secs), "{secs}");
        }
    }
}
