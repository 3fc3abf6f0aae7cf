//! Values as the Python side of the connector prints them (``sources/mysql/values.py``), so that a
//! change decoded here has the same text as one decoded in Python: a ``FLOAT``'s digits as
//! ``values._float32`` picks them, dates and times as ``datetime.isoformat`` and MySQL print
//! them. JSON strings and floats are written as ``json.dumps`` writes them (the bridge's).

use std::fmt::Write;

pub use bridge::{push_json_string, push_py_float};

/// A ``FLOAT`` as ``values._float32`` gives it: the first of 6 to 9 significant digits that
/// reads back as the same 32-bit float (a query returns MySQL's own short text; both agree).
///
/// ``wide`` is the float as Python holds it: the 32-bit value widened (the binlog), or the
/// double a query's text parses to.
pub fn float32_value(wide: f64) -> f64 {
    let single = wide as f32;
    if !wide.is_finite() {
        return wide;
    }
    for digits in 6..=9 {
        let text = format!("{:.*e}", digits - 1, wide);
        let candidate: f64 = text.parse().expect("a formatted float parses");
        if (candidate as f32).to_bits() == single.to_bits() {
            return candidate;
        }
    }
    wide
}

/// The fractional seconds of a column with ``fsp`` digits (none for 0), truncated as
/// ``values._fraction`` does.
pub fn push_fraction(out: &mut String, micros: u32, fsp: u8) {
    if fsp > 0 {
        let text = format!(".{micros:06}");
        out.push_str(&text[..=usize::from(fsp.min(6))]);
    }
}

/// Whether a civil date exists (Python's ``datetime`` refuses the others).
pub fn is_valid_date(year: u32, month: u32, day: u32) -> bool {
    if !(1..=9999).contains(&year) || !(1..=12).contains(&month) || day == 0 {
        return false;
    }
    let leap = (year.is_multiple_of(4) && !year.is_multiple_of(100)) || year.is_multiple_of(400);
    let days = match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    day <= days
}

/// ``YYYY-MM-DD`` (``date.isoformat``).
pub fn push_date(out: &mut String, year: u32, month: u32, day: u32) {
    let _ = write!(out, "{year:04}-{month:02}-{day:02}");
}

/// ``YYYY-MM-DD HH:MM:SS`` then the fraction (``isoformat(" ", "seconds")`` + fraction).
#[allow(clippy::too_many_arguments)]
pub fn push_datetime(
    out: &mut String,
    (year, month, day): (u32, u32, u32),
    (hour, minute, second): (u32, u32, u32),
    micros: u32,
    fsp: u8,
) {
    push_date(out, year, month, day);
    let _ = write!(out, " {hour:02}:{minute:02}:{second:02}");
    push_fraction(out, micros, fsp);
}

/// The civil date of a day count since 1970-01-01 (Howard Hinnant's ``civil_from_days``).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// A ``TIMESTAMP`` as ``datetime.utcfromtimestamp`` and ``values.json_value`` give it: UTC, the
/// column's fraction, ``+00:00``.
pub fn push_timestamp(out: &mut String, seconds: i64, micros: u32, fsp: u8) {
    let (year, month, day) = civil_from_days(seconds.div_euclid(86_400));
    let clock = seconds.rem_euclid(86_400) as u32;
    push_datetime(
        out,
        (year as u32, month, day),
        (clock / 3600, clock / 60 % 60, clock % 60),
        micros,
        fsp,
    );
    out.push_str("+00:00");
}

/// A ``TIME`` as ``values.time_text`` prints it: ``[-]HH:MM:SS[.fff]``, hours past 24.
pub fn push_time(out: &mut String, negative: bool, total_micros: u64, fsp: u8) {
    let seconds = total_micros / 1_000_000;
    let fraction = (total_micros % 1_000_000) as u32;
    if negative && total_micros > 0 {
        out.push('-');
    }
    let _ = write!(
        out,
        "{:02}:{:02}:{:02}",
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60
    );
    push_fraction(out, fraction, fsp);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float32_takes_the_shortest_of_six_to_nine_digits() {
        // the values Python's values._float32 gives for the same floats
        assert_eq!(float32_value(f64::from(1.1f32)), 1.1);
        assert_eq!(float32_value(f64::from(3.402_823_5e38f32)), 3.402_823_5e38);
        assert_eq!(
            float32_value(f64::from(-1.175_494_4e-38f32)),
            -1.175_494_4e-38
        );
        assert_eq!(float32_value(f64::from(-3.4e38f32)), -3.4e38);
        // a query's double: the first digits that give the same 32-bit float, from the double
        assert_eq!(float32_value(16_777_217.0), 16_777_217.0);
    }

    #[test]
    fn times_and_timestamps_print_as_the_python_side() {
        let mut out = String::new();
        push_time(
            &mut out,
            true,
            838 * 3_600_000_000 + 59 * 60_000_000 + 59_000_000,
            0,
        );
        assert_eq!(out, "-838:59:59");
        out.clear();
        push_time(&mut out, true, 1, 6);
        assert_eq!(out, "-00:00:00.000001");
        out.clear();
        push_timestamp(&mut out, 2_147_483_647, 999_999, 3);
        assert_eq!(out, "2038-01-19 03:14:07.999+00:00");
        out.clear();
        push_timestamp(&mut out, 0, 0, 0);
        assert_eq!(out, "1970-01-01 00:00:00+00:00");
        assert!(!is_valid_date(2023, 2, 29));
        assert!(is_valid_date(2024, 2, 29));
    }
}
