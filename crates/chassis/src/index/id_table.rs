//! The id → slot table (ADR-0008 decision 3): built lazily from the slot-header arrays alone,
//! only for files whose ids were ever chosen by the caller; index-assigned ids are their slots.
//!
//! Invariant: once built, the table holds exactly the ids live in this writer's view (pending
//! adds and deletes included); every add and delete keeps it so.

use std::collections::HashMap;

use crate::error::{Error, Result};
use crate::format::header::FLAG_CUSTOM_IDS;
use crate::format::metadata::Metadata;
use crate::idmap::IdHashBuilder;

use super::{lock, Index};

pub(super) type IdMap = HashMap<u64, u32, IdHashBuilder>;

impl Index {
    /// Builds the id → slot table from the slot-header arrays alone (ADR-0008 decision 3).
    pub(super) fn build_id_table(&self) -> Result<IdMap> {
        // slot_live, inlined: one read of each slot header gives both the id and the deleted
        // epoch (this loop runs over every slot, 10M of them in experiment 5). The live pairs
        // are collected first, then the table filled: two passes that each stream through one
        // kind of memory (ADR-0008's experiment 5 measured this as the faster build).
        let e = self.store.header().delete_epoch;
        let pending = !self.pending_deletes.is_empty();
        let mut pairs: Vec<(u64, u32)> = Vec::with_capacity(self.count as usize);
        for slot in 0..self.count {
            let Some((id, d, _)) = self.store.slot_header(slot) else {
                continue;
            };
            if (d != 0 && d <= e) || (pending && self.pending_deletes.contains(&slot)) {
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

    pub(super) fn with_ids<T>(&self, f: impl FnOnce(&mut IdMap) -> T) -> Result<T> {
        let mut guard = lock(&self.ids);
        if guard.is_none() {
            *guard = Some(self.build_id_table()?);
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

    /// Whether `id` is stored and not deleted.
    pub fn contains(&self, id: u64) -> Result<bool> {
        Ok(self.lookup(id)?.is_some())
    }

    /// The stored vector of `id` (for cosine, the unit vector that was stored).
    pub fn get(&self, id: u64) -> Result<Vec<f32>> {
        let slot = self.lookup(id)?.ok_or(Error::NotFound { id })?;
        self.store
            .vector(slot)
            .map(|v| v.to_vec())
            .ok_or_else(|| Error::corrupt("vector unreadable", 0))
    }

    /// The metadata stored with `id` (empty when it has none); [`Error::NotFound`] if `id` is
    /// not live, [`Error::Corrupt`] if its document doesn't read back.
    pub fn get_metadata(&self, id: u64) -> Result<Metadata> {
        let slot = self.lookup(id)?.ok_or(Error::NotFound { id })?;
        Ok(self.store.metadata(slot)?.to_metadata())
    }
}
