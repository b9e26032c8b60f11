//! Reading the two header copies from a file before anything is mapped: both as found (for
//! inspection), the current one (decision 4: the newest valid copy), and whether a file is
//! unborn (creation may start over). Reads only; writing a copy is the commit protocol's.

use super::DATA_START;
use crate::error::{Error, Result};
use crate::format::{self, header, header::Header};
use crate::os::Storage;

/// The two header copies as found, for inspection tools.
#[derive(Debug)]
pub struct HeaderCopies {
    /// Copy A, decoded or why not.
    pub a: Result<Header>,
    /// Copy B, decoded or why not.
    pub b: Result<Header>,
}

fn read_copy(storage: &dyn Storage, len: u64, copy: usize) -> Result<Vec<u8>> {
    let off = format::header_offset(copy);
    let n = len.saturating_sub(off).min(format::HEADER_COPY_BYTES);
    let mut buf = vec![0u8; n as usize];
    storage.read_at(off, &mut buf)?;
    Ok(buf)
}

/// Reads and decodes both header copies without choosing.
pub fn read_header_copies(storage: &dyn Storage) -> Result<HeaderCopies> {
    let len = storage.len()?;
    let a = read_copy(storage, len, 0)?;
    let b = read_copy(storage, len, 1)?;
    Ok(HeaderCopies {
        a: Header::decode(&a, format::HEADER_A_OFFSET),
        b: Header::decode(&b, format::HEADER_B_OFFSET),
    })
}

/// Whether a file may be (re)initialised by create (decision 7, creation in place): it is
/// empty, or it is exactly the fixed area's size with both header copies invalid (neither too
/// new) and a zero live page, which only an interrupted creation leaves. Anything else with
/// both copies invalid is corrupt and is never reinitialised.
pub(super) fn is_unborn(storage: &dyn Storage) -> Result<bool> {
    let len = storage.len()?;
    if len == 0 {
        return Ok(true);
    }
    if len != DATA_START {
        return Ok(false);
    }
    match read_current_header(storage) {
        Ok(_) | Err(Error::TooNew { .. }) => return Ok(false),
        Err(_) => {}
    }
    let mut live = vec![0u8; format::LIVE_PAGE_BYTES as usize];
    storage.read_at(format::LIVE_PAGE_OFFSET, &mut live)?;
    Ok(live.iter().all(|&b| b == 0))
}

/// Reads both header copies and chooses the current one (decision 4), without mapping
/// anything: the newest valid header and which copy (0 = A, 1 = B) holds it.
pub fn read_current_header(storage: &dyn Storage) -> Result<(Header, usize)> {
    let len = storage.len()?;
    let a = read_copy(storage, len, 0)?;
    let b = read_copy(storage, len, 1)?;
    header::choose(&a, &b)
}
