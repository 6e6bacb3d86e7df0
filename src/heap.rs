//! Giving back what the process holds resident but no longer needs after a burst of work.
//!
//! glibc's allocator keeps freed memory for reuse, so a daemon's RSS stays at its highest point
//! ever: with ten thousand jobs, the startup catch-up (a listing and a decision per job) set it
//! for the process's whole life. And the pages of the program that only the startup ran
//! (argument and schedule parsing, the first session, the HTTP listener's setup) stay mapped.
//! After such a burst the fire driver asks for both to be returned once things are quiet.
//! Owns: the one call into the allocator, and paging out this program's own read-only pages.
//! Must not: decide when (the fire driver does).

/// Returns free heap memory to the OS where the allocator keeps it (glibc); elsewhere nothing.
pub fn give_back() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists; it takes the allocator's
    // locks like any malloc call and touches no memory in use.
    unsafe {
        nix::libc::malloc_trim(0);
    }
    page_out_program();
}

/// Pages out this program's read-only, file-backed mappings (its code and constants): what the
/// idle daemon runs faults back in from the page cache at its next use, so what stays resident
/// is its working set, not everything the startup touched. Never its writable mappings: those
/// hold state.
fn page_out_program() {
    #[cfg(target_os = "linux")]
    {
        let (Ok(maps), Ok(exe)) = (
            std::fs::read_to_string("/proc/self/maps"),
            std::fs::read_link("/proc/self/exe"),
        ) else {
            return;
        };
        for (start, len) in read_only_mappings(&maps, &exe.to_string_lossy()) {
            let Some(addr) = std::ptr::NonNull::new(start as *mut std::ffi::c_void) else {
                continue;
            };
            // SAFETY: a read-only private file mapping of our own executable: paging it out
            // drops clean pages that the kernel reads back from the file on the next access;
            // no content can change or be lost.
            let _ = unsafe {
                nix::sys::mman::madvise(addr, len, nix::sys::mman::MmapAdvise::MADV_PAGEOUT)
            };
        }
    }
}

/// `(start, length)` of each mapping of `exe` in `/proc/self/maps` text that is not writable.
fn read_only_mappings(maps: &str, exe: &str) -> Vec<(usize, usize)> {
    maps.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (range, perms) = (fields.next()?, fields.next()?);
            let path = fields.nth(3)?;
            if path != exe || perms.contains('w') || !perms.starts_with('r') {
                return None;
            }
            let (start, end) = range.split_once('-')?;
            let start = usize::from_str_radix(start, 16).ok()?;
            let end = usize::from_str_radix(end, 16).ok()?;
            (end > start).then(|| (start, end - start))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_programs_read_only_mappings_are_paged_out() {
        let maps = "\
55d0c0000000-55d0c0100000 r--p 00000000 08:01 42 /usr/bin/zkcron
55d0c0100000-55d0c0500000 r-xp 00100000 08:01 42 /usr/bin/zkcron
55d0c0500000-55d0c0600000 rw-p 00500000 08:01 42 /usr/bin/zkcron
7f0000000000-7f0000100000 r-xp 00000000 08:01 7 /usr/lib/x86_64-linux-gnu/libc.so.6
7f0000200000-7f0000300000 rw-p 00000000 00:00 0 
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]";
        assert_eq!(
            read_only_mappings(maps, "/usr/bin/zkcron"),
            vec![(0x55d0_c000_0000, 0x10_0000), (0x55d0_c010_0000, 0x40_0000)]
        );
    }
}
