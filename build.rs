//! Stamps the git revision into the binary (`gap-auditor --version`,
//! `gap_auditor_build_info{revision}`), so an operator can tell which commit is running.
//!
//! Order: `git rev-parse --short=12 HEAD` in the source tree; else the environment variable
//! `GAP_AUDITOR_GIT_REV` (the Dockerfile passes it as a build argument because `.git` is
//! not in the build context); else `unknown`. The result is `GAP_AUDITOR_REVISION` for
//! `env!`.
//!
//! Rebuild triggers are only `.git/HEAD`, the ref it points to, `packed-refs` and the
//! variable: never "always", which would relink the binary on every `cargo` call.
//!
//! Also says whether the binary carries an SBOM: `cargo auditable build` (the Dockerfile's
//! release build) runs the compiler of this package through itself as
//! `RUSTC_WORKSPACE_WRAPPER`, which embeds the dependency list in a `.dep-v0` section that
//! `cargo audit bin`, syft and trivy read. `GAP_AUDITOR_SBOM` is `cargo-auditable` then,
//! else `none`; `--version` says which (scripts/check-packaging.sh checks the section is
//! really there when it says so).

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=GAP_AUDITOR_GIT_REV");
    let root = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    for path in git_watch_paths(&root) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    let revision = git(&root, &["rev-parse", "--short=12", "HEAD"])
        .filter(|r| is_revision(r))
        .or_else(|| {
            std::env::var("GAP_AUDITOR_GIT_REV")
                .ok()
                .map(|r| r.trim().to_owned())
                .filter(|r| is_revision(r))
        })
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=GAP_AUDITOR_REVISION={revision}");

    println!("cargo:rerun-if-env-changed=RUSTC_WORKSPACE_WRAPPER");
    let auditable = std::env::var_os("RUSTC_WORKSPACE_WRAPPER").is_some_and(|w| {
        Path::new(&w)
            .file_name()
            .is_some_and(|name| name.to_string_lossy().starts_with("cargo-auditable"))
    });
    let sbom = if auditable { "cargo-auditable" } else { "none" };
    println!("cargo:rustc-env=GAP_AUDITOR_SBOM={sbom}");
}

/// Runs git in `dir`; `None` when git is missing, `dir` is no repository, or it failed.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?;
    Some(text.trim().to_owned())
}

/// A short hash, or a release name such as `v0.1.0`: nothing that could break the
/// `--version` line or a Prometheus label value.
fn is_revision(r: &str) -> bool {
    !r.is_empty()
        && r.len() <= 64
        && r.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '+'))
}

/// The files whose change means a new revision. Only existing files: cargo treats a
/// missing `rerun-if-changed` path as always changed.
fn git_watch_paths(root: &Path) -> Vec<PathBuf> {
    let mut paths = Vec::new();
    let Some(head) = git(root, &["rev-parse", "--git-path", "HEAD"]) else {
        return paths;
    };
    paths.push(root.join(head));
    if let Some(reference) = git(root, &["symbolic-ref", "-q", "HEAD"])
        && let Some(file) = git(root, &["rev-parse", "--git-path", &reference])
    {
        paths.push(root.join(file));
    }
    if let Some(packed) = git(root, &["rev-parse", "--git-path", "packed-refs"]) {
        paths.push(root.join(packed));
    }
    paths.retain(|p| p.exists());
    paths
}
