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

/// Declares the daemon's global allocator and its options in a binary: `gap-auditor` and
/// the benchmark (whose in-process tailing path must run on the allocator it measures).
///
/// jemalloc, not glibc's malloc: under a long total loss the audit churns millions of small
/// keys across threads, and glibc's arenas kept the freed blocks (live heap flat at ~40 MiB
/// while resident memory crept +10-20 % over 5 minutes, measured with heaptrack on the
/// keys_total_loss fault test). jemalloc's size classes and decay give the pages back.
///
/// jemalloc's options (an operator's `_RJEM_MALLOC_CONF` still overrides them): a background
/// thread returns freed pages after 1 s instead of 10 s, and without waiting for the next
/// allocation. With the defaults the dirty pages a busy round leaves made resident memory
/// follow the load (80 to 111 MiB over 10 minutes of a total loss on a loaded machine, live
/// heap flat); with these it stayed within 93-109 MiB from the first minute on. Two arenas,
/// as for glibc (`memory::limit_arenas`): the default (4 per core) took 265 MiB peak for the
/// 500,000-gap round that took 241 MiB with glibc; two, 235 MiB.
#[macro_export]
macro_rules! daemon_allocator {
    () => {
        #[global_allocator]
        static GLOBAL: ::tikv_jemallocator::Jemalloc = ::tikv_jemallocator::Jemalloc;

        /// jemalloc's options (see `gap_auditor::daemon_allocator`).
        #[unsafe(export_name = "_rjem_malloc_conf")]
        pub static MALLOC_CONF: &[u8] =
            b"narenas:2,background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0\0";
    };
}
