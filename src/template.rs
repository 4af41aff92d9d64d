//! The `{name}` template language of `match.id_template`: literal text and placeholders in
//! braces, such as `{topic}+{partition}+{offset}`. One parser, so that validating a
//! template and building ids from it can never disagree on what it means.

/// One piece of a parsed template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece<'a> {
    /// Text copied as is.
    Literal(&'a str),
    /// A `{name}` placeholder: the name between the braces.
    Name(&'a str),
}

/// Splits `template` into literal text and placeholders, or says what is wrong with it (an
/// unmatched brace, an empty or nested placeholder). Empty literals are left out.
pub fn parse(template: &str) -> Result<Vec<Piece<'_>>, String> {
    let mut out = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find(['{', '}']) {
        if rest[open..].starts_with('}') {
            return Err("has a `}` without a matching `{`".to_owned());
        }
        if open > 0 {
            out.push(Piece::Literal(&rest[..open]));
        }
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else {
            return Err("has a `{` without a matching `}`".to_owned());
        };
        let name = &after[..close];
        if name.is_empty() || name.contains('{') {
            return Err("has an empty or nested `{}` placeholder".to_owned());
        }
        out.push(Piece::Name(name));
        rest = &after[close + 1..];
    }
    if !rest.is_empty() {
        out.push(Piece::Literal(rest));
    }
    Ok(out)
}

/// The placeholder names of `template`, in order, or what is wrong with it.
pub fn placeholders(template: &str) -> Result<Vec<&str>, String> {
    Ok(parse(template)?
        .into_iter()
        .filter_map(|piece| match piece {
            Piece::Name(name) => Some(name),
            Piece::Literal(_) => None,
        })
        .collect())
}

#[cfg(test)]
mod tests;
