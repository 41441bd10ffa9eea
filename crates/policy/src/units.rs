//! Durations (`90s`, `30m`, `1h30m`, `500ms`) and sizes (`512MiB`, `2G`, `4096`).

use std::time::Duration;

/// Parses a duration: one or more `<integer><unit>` groups, units `ms`, `s`, `m`, `h`, `d`.
/// A bare number is refused, because `--timeout 30` is ambiguous between seconds and minutes.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    if t.is_empty() {
        return Err("empty duration: expected something like `90s`, `30m` or `1h30m`".into());
    }
    let mut total: u128 = 0;
    let mut rest = t;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(format!(
                "invalid duration `{t}`: expected a number before `{rest}` (like `90s`, `30m`, `1h30m`)"
            ));
        }
        let number: u128 = rest[..digits]
            .parse()
            .map_err(|_| format!("invalid duration `{t}`: number too large"))?;
        rest = &rest[digits..];
        let unit_len = rest.bytes().take_while(|b| b.is_ascii_alphabetic()).count();
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let millis_per_unit: u128 = match unit {
            "ms" => 1,
            "s" => 1_000,
            "m" | "min" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "" => {
                return Err(format!(
                    "invalid duration `{t}`: a unit is required (`ms`, `s`, `m`, `h`, `d`), e.g. `{number}s`"
                ));
            }
            other => {
                return Err(format!(
                    "invalid duration `{t}`: unknown unit `{other}` (use `ms`, `s`, `m`, `h` or `d`)"
                ));
            }
        };
        total = total
            .checked_add(number.saturating_mul(millis_per_unit))
            .ok_or_else(|| format!("invalid duration `{t}`: too large"))?;
    }
    if total == 0 {
        return Err(format!("invalid duration `{t}`: must be greater than zero"));
    }
    let millis = u64::try_from(total).map_err(|_| format!("invalid duration `{t}`: too large"))?;
    Ok(Duration::from_millis(millis))
}

/// Formats a duration the way [`parse_duration`] reads it back (`1h30m`, `90s`, `250ms`).
pub fn format_duration(d: Duration) -> String {
    let mut ms = d.as_millis();
    if ms == 0 {
        return "0s".into();
    }
    let mut out = String::new();
    for (unit, size) in [
        ("d", 86_400_000u128),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
    ] {
        if ms >= size {
            out.push_str(&format!("{}{unit}", ms / size));
            ms %= size;
        }
    }
    if ms > 0 {
        out.push_str(&format!("{ms}ms"));
    }
    out
}

/// Parses a byte size: an integer with an optional unit `K`, `M`, `G`, `T` (powers of 1024,
/// also written `KiB`, `MiB`...), or `B`.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let digits = t.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return Err(format!(
            "invalid size `{t}`: expected a number with an optional unit, like `512MiB` or `2G`"
        ));
    }
    let number: u64 = t[..digits]
        .parse()
        .map_err(|_| format!("invalid size `{t}`: number too large"))?;
    let shift = match t[digits..].trim() {
        "" | "B" => 0,
        "K" | "KiB" | "k" => 10,
        "M" | "MiB" => 20,
        "G" | "GiB" => 30,
        "T" | "TiB" => 40,
        other => {
            return Err(format!(
                "invalid size `{t}`: unknown unit `{other}` (use K, M, G or T, powers of 1024)"
            ));
        }
    };
    number
        .checked_mul(1u64 << shift)
        .ok_or_else(|| format!("invalid size `{t}`: too large"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn durations_read_as_written() {
        assert_eq!(parse_duration("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("30m").unwrap(), Duration::from_secs(1800));
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
    }

    #[test]
    fn durations_without_unit_or_with_junk_are_refused() {
        for bad in [
            "",
            "30",
            "s",
            "10x",
            "1h-2m",
            "0s",
            "99999999999999999999999d",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?} should be refused");
        }
        assert!(
            parse_duration("30")
                .unwrap_err()
                .contains("unit is required")
        );
    }

    #[test]
    fn sizes_use_powers_of_1024() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("512MiB").unwrap(), 512 << 20);
        assert_eq!(parse_size("2G").unwrap(), 2 << 30);
        assert!(parse_size("2Q").is_err());
        assert!(parse_size("G").is_err());
        assert!(parse_size("99999999999T").is_err());
    }

    proptest! {
        #[test]
        fn formatted_durations_parse_back(ms in 1u64..10_000_000_000) {
            let d = Duration::from_millis(ms);
            prop_assert_eq!(parse_duration(&format_duration(d)).unwrap(), d);
        }

        #[test]
        fn duration_parser_never_panics(s in ".{0,24}") {
            let _ = parse_duration(&s);
            let _ = parse_size(&s);
        }
    }
}
