//! How `check` and `gaps` print their results: a table for a terminal, or JSON.

use gap_auditor::gap::Gap;

use super::Format;

/// Prints a `check` report: the ranges checked, the counts, then the gaps.
pub(super) fn print_check(report: &gap_auditor::commands::check::Report, format: Format) {
    if format == Format::Json {
        match serde_json::to_string_pretty(report) {
            Ok(s) => println!("{s}"),
            Err(e) => eprintln!("error: {e}"),
        }
        return;
    }
    for r in &report.ranges {
        println!(
            "checked {} {}-{} offsets [{}, {})",
            r.audit, r.topic, r.partition, r.from, r.to
        );
        if let (Some(asked), Some(why)) = (r.requested_to, &r.not_checked) {
            println!("  not checked [{}, {}): {why}", r.to, asked);
        }
    }
    println!(
        "records: {} read, {} expected, {} confirmed, {} missing, {} duplicate rows",
        report.consumed, report.expected, report.confirmed, report.lost, report.duplicated
    );
    if report.dead_lettered > 0 {
        println!(
            "{} records dead-lettered: absent from the sink, named by the pipeline's dead-letter topic (not lost)",
            report.dead_lettered
        );
    }
    // Neither confirmed nor missing: said apart, so a clean exit is not read as "all there".
    if report.not_due > 0 {
        println!(
            "{} records not yet due (grace has not passed since they were appended): not checked",
            report.not_due
        );
    }
    println!();
    print_gaps(&report.gaps, Format::Table);
}

/// Prints gaps as a table (`no gaps` when there are none) or as a JSON array.
pub(super) fn print_gaps(gaps: &[Gap], format: Format) {
    if format == Format::Json {
        match serde_json::to_string_pretty(gaps) {
            Ok(s) => println!("{s}"),
            Err(e) => eprintln!("error: {e}"),
        }
        return;
    }
    if gaps.is_empty() {
        println!("no gaps");
        return;
    }
    // REPLAYED: when `replay` marked the gap; with STATE open, not confirmed yet.
    println!(
        "{:<40} {:>9} {:>12} {:>12} {:>8}  {:<13} {:<20} {:<20}",
        "ID", "PARTITION", "FIRST", "LAST", "MISSING", "STATE", "DETECTED", "REPLAYED"
    );
    for g in gaps {
        let missing = if g.size_known {
            g.missing_records.to_string()
        } else {
            format!("≤{}", g.missing_records)
        };
        let replayed = g.replayed_at.map_or_else(
            || "-".to_owned(),
            |t| t.format("%Y-%m-%d %H:%M:%S").to_string(),
        );
        println!(
            "{:<40} {:>9} {:>12} {:>12} {:>8}  {:<13} {:<20} {:<20}",
            g.id,
            format!("{}-{}", g.topic, g.partition),
            g.first_offset,
            g.last_offset,
            missing,
            g.state.as_str(),
            g.detected_at.format("%Y-%m-%d %H:%M:%S"),
            replayed
        );
        // The pipeline's own account of the cause, under its row (Flink evidence).
        if let Some(line) = g.evidence_line() {
            println!("  {line}");
        }
    }
}
