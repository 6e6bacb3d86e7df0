//! Giving back heap memory the process holds but no longer needs after a burst of work.
//!
//! glibc's allocator keeps freed memory for reuse, so a daemon's anonymous memory stays at its
//! highest point ever: with ten thousand jobs, the startup catch-up (a listing and a decision per
//! job) set it for the process's whole life. After such a burst the fire driver asks for it to
//! be returned once things are quiet.
//! The program's own code pages are left alone: they are clean, shared file pages that the
//! kernel reclaims under pressure by itself, and paging them out would only lower RSS at the cost
//! of a page-cache read on the next fire (memory is measured as anonymous memory:
//! docs/BENCHMARKS.md).
//! Owns: the one call into the allocator.
//! Must not: decide when (the fire driver does).

/// Returns free heap memory to the OS where the allocator keeps it (glibc); elsewhere nothing.
pub fn give_back() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists; it takes the allocator's
    // locks like any malloc call and touches no memory in use.
    unsafe {
        nix::libc::malloc_trim(0);
    }
}
