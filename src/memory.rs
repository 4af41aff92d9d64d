//! Keeping the process's resident memory near what it holds. An incident round allocates
//! tens of MiB for a moment (new gaps, their store rows); glibc keeps freed memory in its
//! arenas, so without help the resident size only ever grows towards the peak of every
//! round's garbage.
//!
//! The Rust side allocates from jemalloc (`main.rs`), whose background thread returns
//! freed pages within a second; what is here is for the C libraries that still call
//! glibc's malloc (librdkafka, SQLite).

/// Limits glibc to two malloc arenas, unless `MALLOC_ARENA_MAX` is set (the operator's
/// choice wins). glibc gives each allocating thread its own arena (up to 8 per core), and
/// memory freed in one is not reused by another: measured ~100 MiB resident beside a
/// 500,000-gap ledger. Call before any thread starts.
pub fn limit_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only adjusts allocator parameters; called once, before threads.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 2);
        }
    }
}

/// Returns free heap memory to the system (glibc `malloc_trim`, which also releases free
/// pages inside the heap). Costs a walk of the free lists: for rounds that freed a lot.
pub fn release_free() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases memory malloc holds free.
    unsafe {
        libc::malloc_trim(0);
    }
}
