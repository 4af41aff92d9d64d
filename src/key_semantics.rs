//! key_columns: whether the sink table keeps every row or one row per key (SPEC "The sink's
//! model", `match.key_semantics`), read from the table and reconciled with the config. Pure:
//! the sinks run the queries, this module reads their answers.
//!
//! Why it matters: the key book counts records per key against rows per key. A table that
//! merges equal keys (an upsert) holds one row for any number of records, so counting would
//! report every record beyond the first as lost; under `presence` one row confirms them all.

use crate::config::KeySemanticsSetting;
use std::fmt;

/// How the table treats rows with equal key columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum KeySemantics {
    /// Every row is kept: rows are counted against records, extra rows are duplicates.
    #[default]
    Multiset,
    /// Rows with equal keys are merged: one row confirms every record of its key, and
    /// duplicates cannot exist.
    Presence,
}

impl KeySemantics {
    /// The configuration spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Multiset => "multiset",
            Self::Presence => "presence",
        }
    }
}

impl fmt::Display for KeySemantics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the table says, with the reason, for the startup log and refusals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableModel {
    /// The semantics the table implies.
    pub semantics: KeySemantics,
    /// Why (`PRIMARY KEY (a, b)`, `Doris UNIQUE KEY`, `no unique index within the key`).
    pub reason: String,
}

/// Why an audit cannot start with the configured semantics.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SemanticsError {
    /// The configured value says one thing, the table another.
    #[error(
        "match.key_semantics = \"{configured}\" but the sink table is {table} ({reason}); \
         set match.key_semantics = \"{table}\" or \"auto\""
    )]
    Contradicted {
        configured: KeySemantics,
        table: KeySemantics,
        reason: String,
    },
    /// `auto`, and the table's description could not be read as a key model.
    #[error(
        "match.key_semantics = \"auto\" cannot tell whether the sink table merges equal keys \
         ({0}); set match.key_semantics = \"multiset\" or \"presence\""
    )]
    Undecided(String),
}

/// What the sink could learn of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Learned {
    /// The table's model.
    Known(TableModel),
    /// The table does not exist (yet): nothing can contradict the config.
    NoTable,
    /// The table exists but its description says nothing the auditor can read (why).
    Unreadable(String),
}

/// The semantics the audit uses: the configured one unless the table contradicts it;
/// under `auto` the table's. A missing table keeps the configured value, `multiset` for
/// `auto` (the caller warns: the model is read again on reconnect).
pub fn resolve(
    configured: KeySemanticsSetting,
    learned: &Learned,
) -> Result<KeySemantics, SemanticsError> {
    let wanted = match configured {
        KeySemanticsSetting::Auto => None,
        KeySemanticsSetting::Multiset => Some(KeySemantics::Multiset),
        KeySemanticsSetting::Presence => Some(KeySemantics::Presence),
    };
    match (wanted, learned) {
        (Some(w), Learned::Known(t)) if w != t.semantics => Err(SemanticsError::Contradicted {
            configured: w,
            table: t.semantics,
            reason: t.reason.clone(),
        }),
        (Some(w), _) => Ok(w),
        (None, Learned::Known(t)) => Ok(t.semantics),
        (None, Learned::NoTable) => Ok(KeySemantics::Multiset),
        (None, Learned::Unreadable(why)) => Err(SemanticsError::Undecided(why.clone())),
    }
}

/// MySQL/MariaDB: `(index_name, column_name)` of every unique index of the table
/// (`information_schema.STATISTICS` with `NON_UNIQUE = 0`). An index whose columns all lie
/// among the key columns merges rows with equal keys: `presence`. Otherwise `multiset`.
pub fn from_unique_indexes(key_columns: &[String], indexes: &[(String, String)]) -> TableModel {
    let mut names: Vec<&str> = indexes.iter().map(|(i, _)| i.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    for name in names {
        let columns: Vec<&str> = indexes
            .iter()
            .filter(|(i, _)| i == name)
            .map(|(_, c)| c.as_str())
            .collect();
        // Column names are case-insensitive in MySQL and MariaDB.
        let covered = columns
            .iter()
            .all(|c| key_columns.iter().any(|k| k.eq_ignore_ascii_case(c)));
        if covered {
            let kind = if name.eq_ignore_ascii_case("PRIMARY") {
                "PRIMARY KEY".to_owned()
            } else {
                format!("UNIQUE index `{name}`")
            };
            return TableModel {
                semantics: KeySemantics::Presence,
                reason: format!("{kind} ({}) within the key columns", columns.join(", ")),
            };
        }
    }
    TableModel {
        semantics: KeySemantics::Multiset,
        reason: "no PRIMARY or UNIQUE index within the key columns".to_owned(),
    }
}

/// Doris: the key model in `SHOW CREATE TABLE`'s text (`DUPLICATE KEY(...)`,
/// `UNIQUE KEY(...)`, `AGGREGATE KEY(...)`), or `None` when the text names none. A UNIQUE or
/// AGGREGATE table merges rows equal on ITS key columns, so it merges rows with equal audit
/// keys only when its key columns all lie among them; otherwise rows with one audit key may
/// differ in another table key column and all be kept (`multiset`). Tokens are read outside
/// strings and comments, so a comment or a quoted name spelling the words does not decide.
pub fn from_doris_ddl(key_columns: &[String], ddl: &str) -> Option<TableModel> {
    let toks = ddl_tokens(ddl);
    for (i, pair) in toks.windows(2).enumerate() {
        let (Tok::Bare(model), Tok::Bare(key)) = (&pair[0], &pair[1]) else {
            continue;
        };
        if !key.eq_ignore_ascii_case("KEY") {
            continue;
        }
        // Doris writes its key model with the column list right after it; MySQL's
        // `UNIQUE KEY `name` (...)` is an index, not a model.
        if toks.get(i + 2) != Some(&Tok::Open) {
            continue;
        }
        let model = model.to_ascii_uppercase();
        let merges = match model.as_str() {
            "DUPLICATE" => false,
            "UNIQUE" | "AGGREGATE" => true,
            _ => continue,
        };
        let columns = column_list(&toks[i + 2..]);
        let reason = format!("Doris {model} KEY({})", columns.join(", "));
        let covered = !columns.is_empty()
            && columns
                .iter()
                .all(|c| key_columns.iter().any(|k| k.eq_ignore_ascii_case(c)));
        let semantics = if merges && covered {
            KeySemantics::Presence
        } else {
            KeySemantics::Multiset
        };
        let reason = if merges && !covered {
            format!("{reason}, not within the key columns")
        } else {
            reason
        };
        return Some(TableModel { semantics, reason });
    }
    None
}

/// Whether `ddl` is a Doris-native table (`ENGINE=OLAP`), which always names its key model;
/// a table of another engine (a MySQL-protocol server, an external catalog's table) keeps
/// its merging in its unique indexes instead.
pub fn is_doris_olap(ddl: &str) -> bool {
    let toks = ddl_tokens(ddl);
    toks.windows(3).any(|w| match w {
        [Tok::Bare(e), Tok::Other, Tok::Bare(o)] => {
            e.eq_ignore_ascii_case("ENGINE") && o.eq_ignore_ascii_case("OLAP")
        }
        _ => false,
    })
}

/// The names of a parenthesised column list at the start of `toks` (`(`a`, b)`).
fn column_list(toks: &[Tok]) -> Vec<String> {
    let mut out = Vec::new();
    let mut it = toks.iter();
    if it.next() != Some(&Tok::Open) {
        return out;
    }
    for t in it {
        match t {
            Tok::Bare(n) | Tok::Quoted(n) => out.push(n.clone()),
            Tok::Comma => {}
            _ => break,
        }
    }
    out
}

/// One token of a DDL text.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    /// A keyword or unquoted identifier.
    Bare(String),
    /// A `` `name` `` or `"name"`/`'text'` (never a keyword).
    Quoted(String),
    Open,
    Close,
    Comma,
    Other,
}

/// `ddl` as tokens, comments (`-- …`, `# …`, `/* … */`) left out.
fn ddl_tokens(ddl: &str) -> Vec<Tok> {
    let mut toks = Vec::new();
    let mut word = String::new();
    let mut chars = ddl.chars().peekable();
    let flush = |word: &mut String, toks: &mut Vec<Tok>| {
        if !word.is_empty() {
            toks.push(Tok::Bare(std::mem::take(word)));
        }
    };
    while let Some(c) = chars.next() {
        if c.is_alphanumeric() || c == '_' {
            word.push(c);
            continue;
        }
        flush(&mut word, &mut toks);
        match c {
            '\'' | '"' | '`' => {
                // Backslash escapes and doubled quotes both stay inside.
                let mut text = String::new();
                while let Some(d) = chars.next() {
                    if d == '\\' && c != '`' {
                        if let Some(e) = chars.next() {
                            text.push(e);
                        }
                    } else if d == c {
                        if chars.peek() == Some(&c) {
                            chars.next();
                            text.push(c);
                        } else {
                            break;
                        }
                    } else {
                        text.push(d);
                    }
                }
                toks.push(Tok::Quoted(text));
            }
            '-' if chars.peek() == Some(&'-') => {
                for d in chars.by_ref() {
                    if d == '\n' {
                        break;
                    }
                }
            }
            '#' => {
                for d in chars.by_ref() {
                    if d == '\n' {
                        break;
                    }
                }
            }
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                let mut last = ' ';
                for d in chars.by_ref() {
                    if last == '*' && d == '/' {
                        break;
                    }
                    last = d;
                }
            }
            '(' => toks.push(Tok::Open),
            ')' => toks.push(Tok::Close),
            ',' => toks.push(Tok::Comma),
            c if c.is_whitespace() => {}
            _ => toks.push(Tok::Other),
        }
    }
    flush(&mut word, &mut toks);
    toks
}

#[cfg(test)]
mod tests;
