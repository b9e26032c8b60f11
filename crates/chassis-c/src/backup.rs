//! Online backup through the C API (`chassis_backup`, `chassis_reader_backup`): what a copy
//! did, reported in a C struct. The helpers (argument checks, status codes) are the crate
//! root's.

use super::*;

/// What an online backup did ([`chassis_backup`], [`chassis_reader_backup`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct chassis_backup_report {
    /// The header sequence the destination now holds.
    pub sequence: u64,
    /// Live vectors in the copied state.
    pub live: u64,
    /// Bytes written to the destination.
    pub bytes_shipped: u64,
    /// Bytes of the source's committed state (what a full copy ships).
    pub committed_bytes: u64,
    /// The destination was written whole and renamed over the path.
    pub full_copy: bool,
    /// The destination already held this state: nothing was written.
    pub unchanged: bool,
}

fn backup_report(r: &chassis::BackupReport) -> chassis_backup_report {
    chassis_backup_report {
        sequence: r.sync.sequence,
        live: r.sync.live,
        bytes_shipped: r.sync.bytes_shipped,
        committed_bytes: r.sync.committed_bytes,
        full_copy: r.full_copy,
        unchanged: r.sync.unchanged,
    }
}

/// Copies the last committed state (the last flush) to the file `dst` while writes go on (an
/// online backup). A `dst` holding an earlier backup of this file gets only what changed; a
/// missing one, or one holding another index, gets a full copy renamed over it. `dst` always
/// opens, even after a crash. `CHASSIS_STATUS_LOCKED` when a writer has `dst` open;
/// `CHASSIS_STATUS_INVALID_ARGUMENT` when `dst` is this file or not a Chassis file.
/// `out_report` may be null.
///
/// Thread safety: any thread; writes and searches on the same index never wait for it.
///
/// # Safety
/// `index` is a live handle; `dst` is a NUL-terminated UTF-8 string; `out_report` is null or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn chassis_backup(
    index: *const chassis_index,
    dst: *const c_char,
    out_report: *mut chassis_backup_report,
) -> chassis_status {
    guard(|| {
        // SAFETY: a live handle per the contract.
        let ix = unsafe { index.as_ref() }.ok_or(Fail::Null("index"))?;
        // SAFETY: per this function's contract.
        let dst = unsafe { path_arg(dst) }?;
        let r = read(ix).backup(dst)?;
        if !out_report.is_null() {
            // SAFETY: non-null and writable per the contract.
            unsafe { *out_report = backup_report(&r) };
        }
        Ok(())
    })
}

/// [`chassis_backup`] from a reader: copies the newest state it sees (the writer may be in
/// another process).
///
/// Thread safety: any thread, concurrently with every other call on the same reader.
///
/// # Safety
/// As [`chassis_backup`], with `reader` a live reader handle.
#[no_mangle]
pub unsafe extern "C" fn chassis_reader_backup(
    reader: *const chassis_reader,
    dst: *const c_char,
    out_report: *mut chassis_backup_report,
) -> chassis_status {
    guard(|| {
        // SAFETY: a live handle per the contract.
        let r = unsafe { reader.as_ref() }.ok_or(Fail::Null("reader"))?;
        // SAFETY: per this function's contract.
        let dst = unsafe { path_arg(dst) }?;
        let report = r.inner.backup(dst)?;
        if !out_report.is_null() {
            // SAFETY: non-null and writable per the contract.
            unsafe { *out_report = backup_report(&report) };
        }
        Ok(())
    })
}
