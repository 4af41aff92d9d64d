//! DECIMAL(p, s) and integer values as the column stores them.
//!
//! Read: an optional sign, digits with an optional point (`1.5`, `.5`, `5.`), an optional
//! exponent (`1e2`): what MySQL and MariaDB read from a string. Rounded half away from zero
//! to the column's scale (MariaDB 10.11 stores `1.005` in DECIMAL(6,2) as `1.01`, `-1.5` in
//! INT as `-2`, `1e2` in TINYINT as `100`; MySQL alike), written without leading zeros or a
//! `+`, with exactly `s` fractional digits, and never `-0`. A value beyond the column's
//! range is refused: a lenient server stores the range's end, a strict one refuses the
//! row, which the record cannot tell. Computed on the digits (DECIMAL holds up to 65), no
//! floating point.

/// The largest exponent read: beyond it no column holds the value (or a fraction of it).
const MAX_EXPONENT: i64 = 100;

/// A number as its decimal digits: `negative`, `digits` (no leading zeros needed) and the
/// position of the point counted from the left of `digits` (may be outside them).
struct Digits {
    negative: bool,
    digits: Vec<u8>,
    point: i64,
}

/// `v` (trimmed) stored in a `DECIMAL(precision, scale)` column.
pub(super) fn decimal(v: &str, precision: u8, scale: u8) -> Option<String> {
    let d = parse(v)?;
    let (negative, int, frac) = round(&d, usize::from(scale))?;
    if int.len() + usize::from(scale) > usize::from(precision.max(1)) && int != "0" {
        return None;
    }
    let mut out = String::new();
    if negative {
        out.push('-');
    }
    out.push_str(&int);
    if scale > 0 {
        out.push('.');
        out.push_str(&frac);
    }
    Some(out)
}

/// `v` (trimmed) stored in an integer column holding `min..=max`.
pub(super) fn integer(v: &str, min: i128, max: i128) -> Option<String> {
    let d = parse(v)?;
    let (negative, int, _) = round(&d, 0)?;
    // At most 39 digits fit an i128; an integer column holds at most 20.
    if int.len() > 38 {
        return None;
    }
    let n: i128 = int.parse().ok()?;
    let n = if negative { -n } else { n };
    (min..=max).contains(&n).then(|| n.to_string())
}

/// Rounds `d` half away from zero to `scale` fractional digits: (negative, integer part
/// without leading zeros, `scale` fractional digits). Never negative zero.
fn round(d: &Digits, scale: usize) -> Option<(bool, String, String)> {
    // The digit at position `i` counted from the point (0 = first fractional digit,
    // -1 = units).
    let digit = |i: i64| -> u8 {
        let at = d.point + i;
        if at < 0 {
            return 0;
        }
        d.digits.get(at as usize).copied().unwrap_or(0)
    };
    let int_len = d.point.max(1);
    // Integer digits then the kept fractional digits, most significant first.
    let mut kept: Vec<u8> = (-int_len..scale as i64).map(digit).collect();
    if digit(scale as i64) >= 5 {
        let mut carry = true;
        for x in kept.iter_mut().rev() {
            if !carry {
                break;
            }
            *x += 1;
            carry = *x == 10;
            if carry {
                *x = 0;
            }
        }
        if carry {
            kept.insert(0, 1);
        }
    }
    let split = kept.len() - scale;
    let int: String = kept[..split]
        .iter()
        .map(|&x| char::from(b'0' + x))
        .collect();
    let int = match int.trim_start_matches('0') {
        "" => "0".to_string(),
        s => s.to_string(),
    };
    let frac: String = kept[split..]
        .iter()
        .map(|&x| char::from(b'0' + x))
        .collect();
    let zero = int == "0" && frac.bytes().all(|b| b == b'0');
    Some((d.negative && !zero, int, frac))
}

/// Reads `[+-]digits[.digits][(e|E)[+-]digits]` with at least one digit in the mantissa.
fn parse(v: &str) -> Option<Digits> {
    let b = v.as_bytes();
    let mut pos = 0;
    let negative = match b.first() {
        Some(b'-') => {
            pos += 1;
            true
        }
        Some(b'+') => {
            pos += 1;
            false
        }
        _ => false,
    };
    let mut digits = Vec::new();
    let mut point = None;
    while pos < b.len() {
        match b[pos] {
            d @ b'0'..=b'9' => digits.push(d - b'0'),
            b'.' if point.is_none() => point = Some(digits.len() as i64),
            _ => break,
        }
        pos += 1;
    }
    if digits.is_empty() {
        return None;
    }
    let mut point = point.unwrap_or(digits.len() as i64);
    if pos < b.len() {
        if !matches!(b[pos], b'e' | b'E') {
            return None;
        }
        let exp: i64 = v[pos + 1..].parse().ok()?;
        if exp.abs() > MAX_EXPONENT {
            return None;
        }
        point += exp;
    }
    Some(Digits {
        negative,
        digits,
        point,
    })
}
