//! The controller's memory allocator: blocks under 1 KiB from mimalloc,
//! larger ones from the C library's `malloc`.
//!
//! A one-look `status` at 10,000 hives makes millions of small blocks
//! (names, hash texts, the decoder's strings) on four threads, most freed
//! on another thread than the one that made them. Under glibc alone,
//! `malloc` and `free` were a tenth of the binary's CPU and its arena
//! locks a share of its thread switches. mimalloc alone made the binary
//! 13% faster but held 8 to 10 MiB more at its peak (each thread keeps
//! its own pages of every size, and the read buffers, freed on the
//! decoding threads, went back to pages nobody reused), past the 50 MiB
//! goal. Split at 1 KiB it kept the speed and glibc's peak: at 10,000
//! hives, 24 alternated runs, a median 198 against 240 ms and 246
//! against 292 ms of CPU, 42 against 44 MiB at most
//! (docs/benchmarks-controller.md, "Stop 39").
//!
//! `HYPERHIVE_ALLOCATOR=system` takes every block from the C library, as
//! before (read once, at the first allocation; the command line rejects
//! any other value, [`check_choice`]).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU8, Ordering};

/// Blocks smaller than this come from mimalloc.
const SMALL_BELOW: usize = 1024;

/// The environment variable that chooses (as the allocator reads it, with
/// no allocation), and its values.
const CHOICE_VAR_C: &std::ffi::CStr = c"HYPERHIVE_ALLOCATOR";
pub const CHOICE_VAR: &str = match CHOICE_VAR_C.to_str() {
    Ok(name) => name,
    Err(_) => panic!("the variable's name is ASCII"),
};
const SPLIT: &str = "split";
const SYSTEM: &str = "system";

const UNREAD: u8 = 0;
const SPLIT_ON: u8 = 1;
const SYSTEM_ONLY: u8 = 2;

/// What [`CHOICE_VAR`] chose, read at the first allocation.
static MODE: AtomicU8 = AtomicU8::new(UNREAD);

/// The allocator of the `swarm-controller` binary (and of the benchmarks
/// that measure it): `#[global_allocator]` in its `main.rs`.
pub struct Allocator;

impl Allocator {
    /// Whether a block of `size` bytes comes from mimalloc. A block's
    /// size never changes its source except through
    /// [`GlobalAlloc::realloc`], which moves it.
    #[inline]
    fn small(size: usize) -> bool {
        size < SMALL_BELOW && split_on()
    }
}

#[inline]
fn split_on() -> bool {
    match MODE.load(Ordering::Relaxed) {
        SPLIT_ON => true,
        SYSTEM_ONLY => false,
        _ => read_mode(),
    }
}

#[cold]
fn read_mode() -> bool {
    // SAFETY: getenv reads the environment without allocating. The first
    // allocation is made by the runtime's start, on the main thread,
    // before any thread could change the environment; two threads that
    // both got here would read the same value.
    let value = unsafe { libc::getenv(CHOICE_VAR_C.as_ptr()) };
    let system = !value.is_null() && {
        // SAFETY: getenv returned a NUL-terminated string of the
        // environment, left unchanged while it is read.
        unsafe { std::ffi::CStr::from_ptr(value) }.to_bytes() == SYSTEM.as_bytes()
    };
    MODE.store(
        if system { SYSTEM_ONLY } else { SPLIT_ON },
        Ordering::Relaxed,
    );
    !system
}

/// The problem with [`CHOICE_VAR`]'s value, if it names no allocator.
pub fn check_choice() -> Option<String> {
    let value = std::env::var_os(CHOICE_VAR)?;
    match value.to_str() {
        Some(SPLIT | SYSTEM) => None,
        _ => Some(format!(
            "{CHOICE_VAR}={value:?}: give {SPLIT:?} (the default: blocks under 1 KiB from mimalloc) or {SYSTEM:?} (every block from the C library)"
        )),
    }
}

// SAFETY: each block is freed, resized and zeroed by the allocator that
// made it: the source is a function of the block's size alone (the mode
// is fixed once read), and realloc across the boundary allocates from the
// other one, copies and frees. Both allocators meet GlobalAlloc's
// contract, alignment included.
unsafe impl GlobalAlloc for Allocator {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if Self::small(layout.size()) {
            // SAFETY: the caller's layout, passed on.
            unsafe { mimalloc::MiMalloc.alloc(layout) }
        } else {
            // SAFETY: as above.
            unsafe { System.alloc(layout) }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if Self::small(layout.size()) {
            // SAFETY: the caller's layout, passed on.
            unsafe { mimalloc::MiMalloc.alloc_zeroed(layout) }
        } else {
            // SAFETY: as above.
            unsafe { System.alloc_zeroed(layout) }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if Self::small(layout.size()) {
            // SAFETY: a block of this size came from mimalloc.
            unsafe { mimalloc::MiMalloc.dealloc(ptr, layout) }
        } else {
            // SAFETY: a block of this size came from the C library.
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        match (Self::small(layout.size()), Self::small(new_size)) {
            // SAFETY: the block stays with the allocator that made it.
            (true, true) => unsafe { mimalloc::MiMalloc.realloc(ptr, layout, new_size) },
            // SAFETY: as above.
            (false, false) => unsafe { System.realloc(ptr, layout, new_size) },
            _ => {
                // SAFETY: the caller guarantees new_size, rounded up to
                // the alignment, does not overflow isize.
                let new_layout =
                    unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
                // SAFETY: a non-zero size (the caller's contract).
                let new = unsafe { self.alloc(new_layout) };
                if !new.is_null() {
                    // SAFETY: both blocks are valid for the shorter length
                    // and distinct; the old one is freed by its own
                    // allocator.
                    unsafe {
                        std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                        self.dealloc(ptr, layout);
                    }
                }
                new
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_keeps_its_bytes_across_the_boundary_both_ways() {
        let a = Allocator;
        let small = Layout::from_size_align(100, 8).unwrap();
        // SAFETY: layouts of non-zero size; each block freed once, with
        // the layout it has.
        unsafe {
            let p = a.alloc(small);
            assert!(!p.is_null());
            for i in 0..100 {
                *p.add(i) = i as u8;
            }
            let big = a.realloc(p, small, 5000);
            assert!(!big.is_null());
            assert!((0..100).all(|i| *big.add(i) == i as u8));
            let back = a.realloc(big, Layout::from_size_align(5000, 8).unwrap(), 10);
            assert!((0..10).all(|i| *back.add(i) == i as u8));
            a.dealloc(back, Layout::from_size_align(10, 8).unwrap());
        }
    }

    #[test]
    fn zeroed_blocks_and_large_alignments_from_either_side() {
        let a = Allocator;
        for (size, align) in [(64, 8), (64, 4096), (4096, 64), (100_000, 16)] {
            let layout = Layout::from_size_align(size, align).unwrap();
            // SAFETY: a non-zero layout, freed once with itself.
            unsafe {
                let p = a.alloc_zeroed(layout);
                assert!(!p.is_null());
                assert_eq!(p as usize % align, 0, "{size} bytes aligned to {align}");
                assert!((0..size).all(|i| *p.add(i) == 0));
                a.dealloc(p, layout);
            }
        }
    }
}
