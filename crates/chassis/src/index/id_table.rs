//! The id → slot table (ADR-0008 decision 3): built lazily from the slot-header arrays alone,
//! only for files whose ids were ever chosen by the caller; index-assigned ids are their slots.
//!
//! Invariant: once built, the table holds every id live in the writer's view (pending adds and
//! deletes included) and maps it to its slot; every add and delete keeps it so. It is shared
//! with searches, which check a slot it names against their own publication (the table may
//! already name a slot a write is adding, or no longer name an id a write is deleting).

use std::collections::HashMap;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::format::header::FLAG_CUSTOM_IDS;
use crate::format::metadata::Metadata;
use crate::idmap::IdHashBuilder;

use super::published::Published;
use super::{lock, Index, Writer};

pub(super) type IdMap = HashMap<u64, u32, IdHashBuilder>;

/// Builds the id → slot table from the slot-header arrays alone (ADR-0008 decision 3), over
/// slots `0..upto` that `dead` doesn't exclude.
fn build_id_table(
    regions: &crate::storage::Regions,
    upto: u32,
    epoch: u64,
    dead: impl Fn(u32) -> bool,
) -> Result<IdMap> {
    // slot_live, inlined: one read of each slot header gives both the id and the deleted
    // epoch (this loop runs over every slot, 10M of them in experiment 5). The live pairs are
    // collected first, then the table filled: two passes that each stream through one kind of
    // memory (ADR-0008's experiment 5 measured this as the faster build).
    let mut pairs: Vec<(u64, u32)> = Vec::with_capacity(upto as usize);
    for slot in 0..upto {
        let Some((id, d, _)) = regions.slot_header(slot) else {
            continue;
        };
        if (d != 0 && d <= epoch) || dead(slot) {
            continue;
        }
        pairs.push((id, slot));
    }
    let mut map = IdMap::with_capacity_and_hasher(pairs.len(), IdHashBuilder::default());
    for (id, slot) in pairs {
        if map.insert(id, slot).is_some() {
            return Err(Error::corrupt(
                format!("id {id} is stored in two live slots"),
                0,
            ));
        }
    }
    Ok(map)
}

impl Writer {
    pub(super) fn with_ids<T>(&self, f: impl FnOnce(&mut IdMap) -> T) -> Result<T> {
        let mut guard = lock(&self.shared.ids);
        if guard.is_none() {
            let pending = &self.pending_deletes;
            *guard = Some(build_id_table(
                &self.store,
                self.count,
                self.store.header().delete_epoch,
                |s| !pending.is_empty() && pending.contains(&s),
            )?);
        }
        match guard.as_mut() {
            Some(map) => Ok(f(map)),
            None => Err(Error::corrupt("id table missing", 0)),
        }
    }

    /// The live slot holding `id`.
    pub(super) fn lookup(&self, id: u64) -> Result<Option<u32>> {
        if self.flags & FLAG_CUSTOM_IDS != 0 {
            return self.with_ids(|m| m.get(&id).copied());
        }
        // Index-assigned ids: id = slot.
        if id >= u64::from(self.count) {
            return Ok(None);
        }
        let slot = id as u32;
        Ok((self.slot_live(slot) && self.id_of(slot)? == id).then_some(slot))
    }
}

/// How many newer publications a lookup follows when the table names a slot its publication
/// doesn't show yet (a write between updating the table and publishing).
const LOOKUP_RETRIES: usize = 1000;

impl Published {
    /// The live slot holding `id` in this publication, or in a newer one when the shared table
    /// already names a slot this one doesn't show (a write is adding it). `newest` loads the
    /// newest publication.
    fn lookup_from(
        self: Arc<Self>,
        id: u64,
        newest: impl Fn() -> Arc<Published>,
    ) -> Result<Option<(Arc<Published>, u32)>> {
        let mut p = self;
        for _ in 0..LOOKUP_RETRIES {
            if !p.custom_ids() {
                // Index-assigned ids: id = slot.
                if id >= u64::from(p.count) {
                    return Ok(None);
                }
                let slot = id as u32;
                let live = p.slot_live(slot, p.count) && p.id_of(slot)? == id;
                return Ok(live.then_some((p, slot)));
            }
            let found = {
                let mut guard = lock(&p.shared.ids);
                if guard.is_none() {
                    let count = p.count;
                    *guard = Some(build_id_table(
                        &p.regions,
                        count,
                        p.header.delete_epoch,
                        |s| p.deleted.deleted(s, p.generation),
                    )?);
                }
                guard.as_ref().and_then(|m| m.get(&id).copied())
            };
            match found {
                None => return Ok(None),
                Some(slot) if slot < p.count => {
                    let live = p.slot_live(slot, p.count);
                    return Ok(live.then_some((p, slot)));
                }
                Some(_) => {
                    std::thread::yield_now();
                    p = newest();
                }
            }
        }
        Ok(None)
    }
}

impl Index {
    fn lookup(&self, id: u64) -> Result<Option<(Arc<Published>, u32)>> {
        self.view
            .load_full()
            .lookup_from(id, || self.view.load_full())
    }

    /// Whether `id` is stored and not deleted.
    pub fn contains(&self, id: u64) -> Result<bool> {
        Ok(self.lookup(id)?.is_some())
    }

    /// The stored vector of `id` (for cosine, the unit vector that was stored).
    pub fn get(&self, id: u64) -> Result<Vec<f32>> {
        let (p, slot) = self.lookup(id)?.ok_or(Error::NotFound { id })?;
        p.regions
            .vector(slot)
            .map(|v| v.to_vec())
            .ok_or_else(|| Error::corrupt("vector unreadable", 0))
    }

    /// The metadata stored with `id` (empty when it has none); [`Error::NotFound`] if `id` is
    /// not live, [`Error::Corrupt`] if its document doesn't read back.
    pub fn get_metadata(&self, id: u64) -> Result<Metadata> {
        let (p, slot) = self.lookup(id)?.ok_or(Error::NotFound { id })?;
        Ok(p.regions.metadata(slot)?.to_metadata())
    }
}
