//! Giving back heap memory the process holds but no longer needs after a burst of work.
//!
//! glibc's allocator keeps freed memory for reuse, so a daemon's anonymous memory stays at its
//! highest point ever: with ten thousand jobs, the startup catch-up (a listing and a decision per
//! job) set it for the process's whole life. After such a burst the fire driver asks for it to
//! be returned once things are quiet; `config::load` asks once its parse's arena is free.
//! The program's own code pages are left alone: they are clean, shared file pages that the
//! kernel reclaims under pressure by itself, and paging them out would only lower RSS at the cost
//! of a page-cache read on the next fire (memory is measured as anonymous memory:
//! docs/BENCHMARKS.md).
//! Owns: the one call into the allocator.
//! Must not: decide when (its callers do).

/// Keeps the allocator giving back the free top of each heap as it is freed, whichever way the
/// frees come. Call once, before the first allocation that matters.
///
/// - The trim threshold, fixed at 64 KiB: glibc raises it after every large free (up to
///   64 MiB) and then keeps that much free memory at the top of a heap for good: the parse of a
///   large schedule file, made on a thread of its own (`config::load`), left 6 MiB of its arena
///   resident at 10 000 jobs (issue 18). 64 KiB rather than glibc's 128: a node has five heaps,
///   and below 64 KiB nothing more was given back (measured at 1000 jobs, issue 32).
/// - No top pad: each heap kept 128 KiB beyond what a trim left, and a node has five heaps
///   (the main one, the parse's, the runtime's threads').
/// - No fast bins (the per-thread cache still serves small blocks first): a block freed into a
///   fast bin joins the free top of its heap only when the bins are consolidated, and that
///   trims nothing in a thread's heap — `malloc_trim` trims only the main heap's top. Which of
///   the parse's frees went that way varied from run to run (the hash maps' order), and one run
///   in three kept 1 MiB of the parse's heap resident (5.4 MiB at 1000 jobs instead of 4.4;
///   issue 32).
pub fn give_back_as_freed() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets numbers in the allocator's parameters, under its lock.
    unsafe {
        nix::libc::mallopt(nix::libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD);
        nix::libc::mallopt(nix::libc::M_TOP_PAD, 0);
        nix::libc::mallopt(nix::libc::M_MXFAST, 0);
    }
}

/// The free top a heap keeps; a set threshold is never raised.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const TRIM_THRESHOLD: i32 = 64 * 1024;

/// Returns free heap memory to the OS where the allocator keeps it (glibc); elsewhere nothing.
pub fn give_back() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists; it takes the allocator's
    // locks like any malloc call and touches no memory in use.
    unsafe {
        nix::libc::malloc_trim(0);
    }
}
