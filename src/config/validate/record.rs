//! Validation of `[audits.record]` and its schema registry.

use super::super::{ConfigError, RecordConfig, RecordFormat, SchemaRegistryConfig, err};
use super::one_source;

impl SchemaRegistryConfig {
    pub(super) fn validate(&self, p: &str) -> Result<(), ConfigError> {
        let url: url::Url = match self.url.parse() {
            Ok(u) => u,
            Err(e) => return err(format!("{p}.url"), format!("not a valid URL ({e})")),
        };
        if !matches!(url.scheme(), "http" | "https") {
            return err(format!("{p}.url"), "scheme must be http or https");
        }
        if !url.username().is_empty() || url.password().is_some() {
            return err(
                format!("{p}.url"),
                "must not embed credentials: set username and password (or password_file)",
            );
        }
        one_source(p, "password", &self.password, &self.password_file)?;
        if self.username.is_none() && (self.password.is_some() || self.password_file.is_some()) {
            return err(format!("{p}.username"), "a password needs a username");
        }
        if self.timeout.is_zero() {
            return err(format!("{p}.timeout"), "must be > 0");
        }
        Ok(())
    }
}

impl RecordConfig {
    pub(super) fn validate(&self, p: &str) -> Result<(), ConfigError> {
        let schema_format = matches!(self.format, RecordFormat::Avro | RecordFormat::Protobuf);
        match &self.schema_registry {
            Some(r) => r.validate(&format!("{p}.schema_registry"))?,
            None if schema_format => {
                return err(
                    format!("{p}.schema_registry.url"),
                    format!("format {} needs the schema registry", self.format.as_str()),
                );
            }
            None => {}
        }
        if schema_format && !self.fields.is_empty() {
            return err(
                format!("{p}.fields"),
                format!(
                    "format {} names its fields in the writer schema: address them by name or /pointer, without fields",
                    self.format.as_str()
                ),
            );
        }
        for (j, field) in self.fields.iter().enumerate() {
            if field.trim().is_empty() {
                return err(format!("{p}.fields[{j}]"), "must not be empty");
            }
            if self.fields[..j].contains(field) {
                return err(
                    format!("{p}.fields[{j}]"),
                    format!("duplicate field `{field}`"),
                );
            }
        }
        if self.format == RecordFormat::Csv {
            if self.fields.is_empty() {
                return err(
                    format!("{p}.fields"),
                    "format csv needs the column names, in order",
                );
            }
            let mut chars = self.delimiter.chars();
            let delimiter = match (chars.next(), chars.next()) {
                (Some(c), None) => c,
                _ => {
                    return err(
                        format!("{p}.delimiter"),
                        format!(
                            "must be exactly one character for format csv, got {}",
                            self.delimiter.chars().count()
                        ),
                    );
                }
            };
            if delimiter == '\n' || delimiter == '\r' {
                return err(format!("{p}.delimiter"), "must not be a line break");
            }
            if self.quote && delimiter == '"' {
                return err(format!("{p}.delimiter"), "cannot be `\"` when quote = true");
            }
        }
        let f = &self.filter;
        let fp = format!("{p}.filter");
        if let Some(count) = f.field_count {
            if count == 0 {
                return err(format!("{fp}.field_count"), "must be > 0");
            }
            if self.format == RecordFormat::Csv && count < self.fields.len() {
                return err(
                    format!("{fp}.field_count"),
                    format!(
                        "{count} is less than the {} names in {p}.fields",
                        self.fields.len()
                    ),
                );
            }
        }
        if let Some(min) = f.min_fields {
            if min == 0 {
                return err(
                    format!("{fp}.min_fields"),
                    "must be > 0 (omit it to disable)",
                );
            }
            if let Some(count) = f.field_count
                && min > count
            {
                return err(
                    format!("{fp}.min_fields"),
                    format!("{min} is more than field_count ({count})"),
                );
            }
        }
        for (j, field) in f.require.iter().enumerate() {
            if field.trim().is_empty() {
                return err(format!("{fp}.require[{j}]"), "must not be empty");
            }
            if self.format == RecordFormat::Csv && !self.fields.contains(field) {
                return err(
                    format!("{fp}.require[{j}]"),
                    format!("field `{field}` is not in {p}.fields"),
                );
            }
        }
        Ok(())
    }
}
