//! The filter index: which slots pass a filter, roughly how many, and whether one slot does,
//! without reading a document.
//!
//! Derived from the metadata, never stored: each handle (the writer, each reader) builds a
//! [`FieldIndex`] for a field the first time a filter names it, from the documents of slots
//! `0..covered`, and extends every field it has to new slots as they appear. Documents never
//! change once their slot is written (a new document for an id is a new slot), so an index
//! only ever grows; liveness (deletes) is checked per slot at search time, not here.
//!
//! Per field:
//! * a column of each slot's value (strings interned), so one slot is tested in a few
//!   nanoseconds: what a graph search does for every slot it visits ([`Compiled::test`]);
//! * postings (roaring bitmaps) of the slots having the field, and of null, false, true and
//!   each string: equality on those, and counts;
//! * every number in two sorted arrays (integers, floats; an unsorted tail of recent additions
//!   is merged in as it grows): ranges and numeric equality by binary search, counted without
//!   collecting.
//!
//! A list contributes each element. [`Compiled::estimate`] counts a filter's slots from these
//! (exactly for one field; assuming fields independent when combined); [`Compiled::collect`]
//! lists them, starting from the smallest part of an `$and` and testing the rest slot by slot.
//!
//! Invariant: for every filter `f` and slot `s < covered`, `compile(f).test(s)` and
//! `s ∈ compile(f).collect()` both equal `f.matches(document of s)`.

use std::collections::{BTreeMap, HashMap};

use roaring::{MultiOps, RoaringBitmap};

use super::{cmp_int_float, Cmp, Cond, Filter, Scalar};
use crate::error::Result;
use crate::format::metadata::{DocRef, ValueRef};

/// Where documents come from: the writer's store or a reader's snapshot.
pub trait DocSource {
    /// The document of `slot` (empty when it has none); an unreadable one is an error.
    fn doc(&self, slot: u32) -> Result<DocRef<'_>>;
}

/// One slot's value of a field, as the column holds it: 8 bytes (numbers and lists live in
/// side tables, so the column a graph search reads per visited slot stays small).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Cell {
    Missing,
    Null,
    Bool(bool),
    /// The field's `int_values[i]`.
    Int(u32),
    /// The field's `float_values[i]`.
    Float(u32),
    /// An interned string.
    Str(u32),
    /// The field's `spans[i]`: (start, len) of its elements in `items`.
    List(u32),
}

/// Values in sorted order with their slots, plus an unsorted tail of recent additions.
#[derive(Debug, Default)]
struct Sorted<T> {
    values: Vec<T>,
    slots: Vec<u32>,
    tail: Vec<(T, u32)>,
}

impl<T: Copy> Sorted<T> {
    fn push(&mut self, v: T, slot: u32) {
        self.tail.push((v, slot));
    }

    /// Merges the tail in once it is large (keeps range queries about a binary search).
    fn settle(&mut self, cmp: impl Fn(&T, &T) -> std::cmp::Ordering) {
        if self.tail.len() < 1024.max(self.values.len() / 16) {
            return;
        }
        let mut all: Vec<(T, u32)> = self
            .values
            .iter()
            .copied()
            .zip(self.slots.iter().copied())
            .chain(self.tail.drain(..))
            .collect();
        all.sort_unstable_by(|a, b| cmp(&a.0, &b.0).then(a.1.cmp(&b.1)));
        self.values = all.iter().map(|p| p.0).collect();
        self.slots = all.iter().map(|p| p.1).collect();
    }

    /// The sorted run `keep` admits, given `below` holds exactly for the values before it
    /// (ranges are contiguous in sorted order).
    fn run(&self, below: impl Fn(&T) -> bool, keep: impl Fn(&T) -> bool) -> std::ops::Range<usize> {
        let start = self.values.partition_point(below);
        start..start + self.values[start..].partition_point(keep)
    }

    fn count(&self, below: impl Fn(&T) -> bool, keep: impl Fn(&T) -> bool) -> u64 {
        let r = self.run(below, &keep);
        (r.len() + self.tail.iter().filter(|(v, _)| keep(v)).count()) as u64
    }

    fn collect(
        &self,
        below: impl Fn(&T) -> bool,
        keep: impl Fn(&T) -> bool,
        out: &mut RoaringBitmap,
    ) {
        let r = self.run(below, &keep);
        let mut slots = self.slots[r].to_vec();
        slots.sort_unstable();
        out.extend(slots);
        out.extend(self.tail.iter().filter(|(v, _)| keep(v)).map(|(_, s)| *s));
    }
}

/// Everything one field's values say about which slots have them.
#[derive(Debug)]
pub struct FieldIndex {
    cells: Vec<Cell>,
    items: Vec<Cell>,
    int_values: Vec<i64>,
    float_values: Vec<f64>,
    spans: Vec<(u32, u32)>,
    present: RoaringBitmap,
    /// Slots whose value is a list.
    lists: RoaringBitmap,
    nulls: RoaringBitmap,
    falses: RoaringBitmap,
    trues: RoaringBitmap,
    string_ids: HashMap<Box<str>, u32, xxhash_rust::xxh3::Xxh3DefaultBuilder>,
    strings: Vec<Box<str>>,
    string_slots: Vec<RoaringBitmap>,
    ints: Sorted<i64>,
    floats: Sorted<f64>,
    /// The slots of each integer, while the field has at most [`INT_POSTINGS_MAX`] distinct
    /// ones (years, categories, buckets): a range is then a union of bitmaps, not a sort.
    /// While kept, `ints` stays empty; past the limit, everything moves to `ints`.
    int_slots: BTreeMap<i64, RoaringBitmap>,
    /// Whether `int_slots` is kept (false once the field had too many distinct integers).
    int_slots_kept: bool,
    /// Slots added since the last [`FieldIndex::settle`], per bitmap: appending a sorted run
    /// at once is far cheaper than pushing into a bitmap slot by slot.
    staged: Staged,
    /// The slot of `cells[0]`: 0, except in a slice built on its own thread, until merged.
    base: u32,
}

/// Slots waiting to join a [`FieldIndex`]'s bitmaps (each list ascending).
#[derive(Debug, Default)]
struct Staged {
    present: Vec<u32>,
    lists: Vec<u32>,
    nulls: Vec<u32>,
    falses: Vec<u32>,
    trues: Vec<u32>,
    strings: Vec<Vec<u32>>,
    ints: BTreeMap<i64, Vec<u32>>,
}

/// Appends ascending `slots` (repeats allowed: a list may hold a value twice) to `b`.
fn append(b: &mut RoaringBitmap, slots: &mut Vec<u32>) {
    slots.dedup();
    let start = slots.partition_point(|&s| b.max().is_some_and(|m| s <= m));
    for &s in &slots[..start] {
        b.insert(s);
    }
    if b.append(slots[start..].iter().copied()).is_err() {
        // Not reachable (the run is ascending and past the bitmap's maximum); insert anyway.
        b.extend(slots[start..].iter().copied());
    }
    slots.clear();
}

/// An `$and` collects (and intersects) a part at most this many times the size of its
/// smallest when the part's slots come from bitmaps (strings, booleans, integers of a field
/// with few distinct ones: a union, a nanosecond or two a slot), and tests larger ones slot
/// by slot (a column read or two each, tens of nanoseconds). On pypi-minilm's tag-and-range
/// queries 64 answered 3x faster than 8 (docs/performance/filtered.md).
const INTERSECT_WITHIN: f64 = 64.0;

/// As [`INTERSECT_WITHIN`] for a part whose slots come from sorted arrays (numbers of a
/// field with many distinct ones: collecting sorts them, about what testing costs).
const INTERSECT_SORTED_WITHIN: f64 = 8.0;

/// Distinct integers up to which a field keeps a bitmap per integer.
const INT_POSTINGS_MAX: usize = 4096;

impl Default for FieldIndex {
    fn default() -> FieldIndex {
        FieldIndex {
            cells: Vec::new(),
            items: Vec::new(),
            int_values: Vec::new(),
            float_values: Vec::new(),
            spans: Vec::new(),
            present: RoaringBitmap::new(),
            lists: RoaringBitmap::new(),
            nulls: RoaringBitmap::new(),
            falses: RoaringBitmap::new(),
            trues: RoaringBitmap::new(),
            string_ids: HashMap::default(),
            strings: Vec::new(),
            string_slots: Vec::new(),
            ints: Sorted::default(),
            floats: Sorted::default(),
            int_slots: BTreeMap::new(),
            int_slots_kept: true,
            staged: Staged::default(),
            base: 0,
        }
    }
}

impl FieldIndex {
    fn scalar(&mut self, v: ValueRef<'_>, slot: u32) -> Cell {
        match v {
            ValueRef::Null => {
                self.staged.nulls.push(slot);
                Cell::Null
            }
            ValueRef::Bool(b) => {
                let s = &mut self.staged;
                if b { &mut s.trues } else { &mut s.falses }.push(slot);
                Cell::Bool(b)
            }
            ValueRef::Int(i) => {
                if self.int_slots_kept {
                    self.staged.ints.entry(i).or_default().push(slot);
                    if self.staged.ints.len() + self.int_slots.len() > INT_POSTINGS_MAX {
                        // Too many distinct integers for a bitmap each: sorted arrays instead.
                        self.spill_ints();
                    }
                } else {
                    self.ints.push(i, slot);
                }
                self.int_values.push(i);
                Cell::Int(self.int_values.len() as u32 - 1)
            }
            ValueRef::Float(f) => {
                self.floats.push(f, slot);
                self.float_values.push(f);
                Cell::Float(self.float_values.len() as u32 - 1)
            }
            ValueRef::Str(s) => {
                let id = match self.string_ids.get(s) {
                    Some(&id) => id,
                    None => {
                        let id = self.strings.len() as u32;
                        self.strings.push(s.into());
                        self.string_ids.insert(s.into(), id);
                        self.string_slots.push(RoaringBitmap::new());
                        id
                    }
                };
                let staged = &mut self.staged.strings;
                if staged.len() <= id as usize {
                    staged.resize_with(id as usize + 1, Vec::new);
                }
                staged[id as usize].push(slot);
                Cell::Str(id)
            }
            ValueRef::List(_) => Cell::Missing,
        }
    }

    /// Records `slot`'s value (slots arrive in order, each once).
    fn add(&mut self, slot: u32, v: Option<ValueRef<'_>>) {
        while self.base as usize + self.cells.len() < slot as usize {
            self.cells.push(Cell::Missing);
        }
        let cell = match v {
            None => Cell::Missing,
            Some(ValueRef::List(l)) => {
                self.staged.present.push(slot);
                self.staged.lists.push(slot);
                let start = self.items.len() as u32;
                for e in l.iter() {
                    let c = self.scalar(e, slot);
                    self.items.push(c);
                }
                self.spans.push((start, self.items.len() as u32 - start));
                Cell::List(self.spans.len() as u32 - 1)
            }
            Some(v) => {
                self.staged.present.push(slot);
                self.scalar(v, slot)
            }
        };
        self.cells.push(cell);
    }

    /// Appends `other`, built on its own thread for the slots right after this one's (its
    /// `base` is this field's slot count), before either is settled.
    fn merge(&mut self, other: FieldIndex) {
        while (self.base as usize + self.cells.len()) < other.base as usize {
            self.cells.push(Cell::Missing);
        }
        // Re-intern the other slice's strings.
        let ids: Vec<u32> = other
            .strings
            .iter()
            .map(|s| match self.string_ids.get(s) {
                Some(&id) => id,
                None => {
                    let id = self.strings.len() as u32;
                    self.strings.push(s.clone());
                    self.string_ids.insert(s.clone(), id);
                    self.string_slots.push(RoaringBitmap::new());
                    id
                }
            })
            .collect();
        let (ints, floats, spans, items) = (
            self.int_values.len() as u32,
            self.float_values.len() as u32,
            self.spans.len() as u32,
            self.items.len() as u32,
        );
        let remap = |c: Cell| match c {
            Cell::Int(i) => Cell::Int(i + ints),
            Cell::Float(i) => Cell::Float(i + floats),
            Cell::Str(id) => Cell::Str(ids[id as usize]),
            Cell::List(i) => Cell::List(i + spans),
            c => c,
        };
        self.cells.extend(other.cells.into_iter().map(remap));
        self.items.extend(other.items.into_iter().map(remap));
        self.spans.extend(
            other
                .spans
                .into_iter()
                .map(|(start, len)| (start + items, len)),
        );
        self.int_values.extend(other.int_values);
        self.float_values.extend(other.float_values);
        let (st, mut o) = (&mut self.staged, other.staged);
        st.present.append(&mut o.present);
        st.lists.append(&mut o.lists);
        st.nulls.append(&mut o.nulls);
        st.falses.append(&mut o.falses);
        st.trues.append(&mut o.trues);
        for (id, mut slots) in o.strings.into_iter().enumerate() {
            let to = ids[id] as usize;
            if st.strings.len() <= to {
                st.strings.resize_with(to + 1, Vec::new);
            }
            st.strings[to].append(&mut slots);
        }
        self.floats.tail.extend(other.floats.tail);
        if self.int_slots_kept && other.int_slots_kept {
            for (v, mut slots) in o.ints {
                st.ints.entry(v).or_default().append(&mut slots);
            }
            if st.ints.len() + self.int_slots.len() > INT_POSTINGS_MAX {
                self.spill_ints();
            }
        } else {
            if self.int_slots_kept {
                self.spill_ints();
            }
            for (v, slots) in o.ints {
                slots.into_iter().for_each(|s| self.ints.push(v, s));
            }
            self.ints.tail.extend(other.ints.tail);
        }
    }

    /// Moves every integer from bitmaps per value to the sorted arrays (too many distinct).
    fn spill_ints(&mut self) {
        for (v, b) in std::mem::take(&mut self.int_slots) {
            b.iter().for_each(|s| self.ints.push(v, s));
        }
        for (v, slots) in std::mem::take(&mut self.staged.ints) {
            slots.into_iter().for_each(|s| self.ints.push(v, s));
        }
        self.int_slots_kept = false;
    }

    fn settle(&mut self) {
        self.ints.settle(|a, b| a.cmp(b));
        self.floats.settle(|a, b| a.total_cmp(b));
        let st = &mut self.staged;
        append(&mut self.present, &mut st.present);
        append(&mut self.lists, &mut st.lists);
        append(&mut self.nulls, &mut st.nulls);
        append(&mut self.falses, &mut st.falses);
        append(&mut self.trues, &mut st.trues);
        for (id, slots) in st.strings.iter_mut().enumerate() {
            if !slots.is_empty() {
                append(&mut self.string_slots[id], slots);
            }
        }
        for (v, mut slots) in std::mem::take(&mut st.ints) {
            append(self.int_slots.entry(v).or_default(), &mut slots);
        }
    }

    /// Slots that have this field.
    pub fn present(&self) -> &RoaringBitmap {
        &self.present
    }

    /// Distinct strings among the field's values.
    pub fn distinct_strings(&self) -> usize {
        self.strings.len()
    }

    /// How many values (list elements counted one by one) are numbers.
    pub fn numbers(&self) -> usize {
        let kept: u64 = self.int_slots.values().map(RoaringBitmap::len).sum();
        kept as usize
            + self.ints.values.len()
            + self.ints.tail.len()
            + self.floats.values.len()
            + self.floats.tail.len()
    }

    fn cell(&self, slot: u32) -> Cell {
        self.cells
            .get(slot as usize)
            .copied()
            .unwrap_or(Cell::Missing)
    }
}

/// Field indexes over the documents of slots `0..covered`.
#[derive(Debug, Default)]
pub struct FilterIndex {
    covered: u32,
    fields: BTreeMap<String, FieldIndex>,
}

impl FilterIndex {
    /// An empty index.
    pub fn new() -> FilterIndex {
        FilterIndex::default()
    }

    /// Slots indexed.
    pub fn covered(&self) -> u32 {
        self.covered
    }

    /// Names of the fields indexed so far, with their indexes.
    pub fn fields(&self) -> impl Iterator<Item = (&str, &FieldIndex)> {
        self.fields.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Whether every field `names` lists is indexed over slots `0..upto`.
    pub fn ready(&self, names: &[&str], upto: u32) -> bool {
        self.covered >= upto && names.iter().all(|n| self.fields.contains_key(*n))
    }

    /// Makes sure `names` are indexed and every indexed field covers slots `0..upto`. Large
    /// ranges are read on several threads, a slice of slots each. On an error (a document
    /// that doesn't read back) the index is emptied, so it never holds part of a range.
    pub fn prepare(
        &mut self,
        names: &[&str],
        upto: u32,
        src: &(dyn DocSource + Sync),
    ) -> Result<()> {
        let r = self.prepare_inner(names, upto, src);
        if r.is_err() {
            *self = FilterIndex::new();
        }
        r
    }

    fn prepare_inner(
        &mut self,
        names: &[&str],
        upto: u32,
        src: &(dyn DocSource + Sync),
    ) -> Result<()> {
        let new: Vec<String> = names
            .iter()
            .filter(|n| !self.fields.contains_key(**n))
            .map(|n| n.to_string())
            .collect();
        if !new.is_empty() {
            let mut built: BTreeMap<String, FieldIndex> = new
                .iter()
                .map(|n| (n.clone(), FieldIndex::default()))
                .collect();
            index_parallel(&mut built, 0, self.covered, src)?;
            self.fields.append(&mut built);
        }
        if upto > self.covered {
            index_parallel(&mut self.fields, self.covered, upto, src)?;
            self.covered = upto;
        }
        for f in self.fields.values_mut() {
            while f.cells.len() < self.covered as usize {
                f.cells.push(Cell::Missing);
            }
            f.settle();
        }
        Ok(())
    }

    /// `filter` bound to this index (its fields must have been prepared).
    pub fn compile<'a>(&'a self, filter: &Filter) -> Compiled<'a> {
        Compiled {
            root: self.node(filter),
            index: self,
        }
    }

    fn node<'a>(&'a self, f: &Filter) -> Node<'a> {
        match f {
            Filter::All => Node::All,
            Filter::And(fs) => self.and_node(fs),
            Filter::Or(fs) => Node::Or(fs.iter().map(|f| self.node(f)).collect()),
            Filter::Not(f) => Node::Not(Box::new(self.node(f))),
            Filter::Field(key, cond) => match self.fields.get(key) {
                // A field no filter ever prepared: no slot is known to have it.
                None if *cond == Cond::Exists(false) => Node::All,
                None => Node::Nothing,
                Some(field) => Node::Leaf {
                    field,
                    test: match cond {
                        Cond::Exists(b) => Test::Exists(*b),
                        Cond::Eq(s) => Test::Eq(vec![resolve(field, s)]),
                        Cond::In(ss) => Test::Eq(ss.iter().map(|s| resolve(field, s)).collect()),
                        Cond::Range(c, s) => Test::Range(*c, s.clone()),
                    },
                },
            },
        }
    }
}

impl FilterIndex {
    /// An `$and`, with a lower and an upper bound on one field joined into one [`Node::Span`]
    /// (`{"f": {"$gte": a, "$lt": b}}` is two conditions; counted apart they would look
    /// independent, and a range's count is exact).
    fn and_node<'a>(&'a self, fs: &[Filter]) -> Node<'a> {
        let is_num = |s: &Scalar| matches!(s, Scalar::Int(_) | Scalar::Float(_));
        let same_kind = |a: &Scalar, b: &Scalar| is_num(a) == is_num(b);
        let mut used = vec![false; fs.len()];
        let mut out = Vec::with_capacity(fs.len());
        for i in 0..fs.len() {
            if used[i] {
                continue;
            }
            let Filter::Field(key, Cond::Range(c, a)) = &fs[i] else {
                continue;
            };
            let lower = matches!(c, Cmp::Gt | Cmp::Gte);
            let partner = (i + 1..fs.len()).find(|&j| {
                !used[j]
                    && matches!(&fs[j], Filter::Field(k2, Cond::Range(c2, b))
                        if k2 == key && matches!(c2, Cmp::Gt | Cmp::Gte) != lower && same_kind(a, b))
            });
            let (Some(j), Some(field)) = (partner, self.fields.get(key)) else {
                continue;
            };
            let Filter::Field(_, Cond::Range(c2, b)) = &fs[j] else {
                continue;
            };
            used[i] = true;
            used[j] = true;
            let ((lc, lo), (hc, hi)) = if lower {
                ((*c, a.clone()), (*c2, b.clone()))
            } else {
                ((*c2, b.clone()), (*c, a.clone()))
            };
            out.push(Node::Span {
                field,
                tests: [Test::Range(lc, lo.clone()), Test::Range(hc, hi.clone())],
                lo: (lc, lo),
                hi: (hc, hi),
            });
        }
        for (f, u) in fs.iter().zip(&used) {
            if !u {
                out.push(self.node(f));
            }
        }
        if out.len() == 1 {
            return out.pop().unwrap_or(Node::All);
        }
        Node::And(out)
    }
}

/// An equality operand resolved against one field (strings to their interned id).
#[derive(Clone, Debug)]
enum Operand {
    Null,
    Bool(bool),
    Num(Scalar),
    Str(Option<u32>),
}

fn resolve(field: &FieldIndex, s: &Scalar) -> Operand {
    match s {
        Scalar::Null => Operand::Null,
        Scalar::Bool(b) => Operand::Bool(*b),
        Scalar::Int(_) | Scalar::Float(_) => Operand::Num(s.clone()),
        Scalar::Str(x) => Operand::Str(field.string_ids.get(x.as_str()).copied()),
    }
}

#[derive(Clone, Debug)]
enum Test {
    Exists(bool),
    /// Equal to any operand.
    Eq(Vec<Operand>),
    Range(Cmp, Scalar),
}

#[derive(Debug)]
enum Node<'a> {
    All,
    Nothing,
    And(Vec<Node<'a>>),
    Or(Vec<Node<'a>>),
    Not(Box<Node<'a>>),
    Leaf {
        field: &'a FieldIndex,
        test: Test,
    },
    /// A lower and an upper bound on one field, both of which must hold (each by any
    /// element of a list, as two separate conditions would).
    Span {
        field: &'a FieldIndex,
        /// The two bounds as tests of one slot.
        tests: [Test; 2],
        lo: (Cmp, Scalar),
        hi: (Cmp, Scalar),
    },
}

/// A filter bound to a [`FilterIndex`]: tests one slot, estimates and lists the slots that
/// pass (all below the index's `covered`).
#[derive(Debug)]
pub struct Compiled<'a> {
    root: Node<'a>,
    index: &'a FilterIndex,
}

fn cmp_cell(field: &FieldIndex, c: Cell, s: &Scalar) -> Option<std::cmp::Ordering> {
    match (c, s) {
        (Cell::Int(i), Scalar::Int(y)) => Some(field.int_values.get(i as usize)?.cmp(y)),
        (Cell::Int(i), Scalar::Float(y)) => cmp_int_float(*field.int_values.get(i as usize)?, *y),
        (Cell::Float(i), Scalar::Float(y)) => field.float_values.get(i as usize)?.partial_cmp(y),
        (Cell::Float(i), Scalar::Int(y)) => {
            cmp_int_float(*y, *field.float_values.get(i as usize)?).map(|o| o.reverse())
        }
        (Cell::Str(id), Scalar::Str(y)) => field
            .strings
            .get(id as usize)
            .map(|x| x.as_bytes().cmp(y.as_bytes())),
        _ => None,
    }
}

fn scalar_passes(field: &FieldIndex, c: Cell, test: &Test) -> bool {
    match test {
        Test::Exists(_) => true,
        Test::Eq(ops) => ops.iter().any(|o| match (o, c) {
            (Operand::Null, Cell::Null) => true,
            (Operand::Bool(b), Cell::Bool(x)) => *b == x,
            (Operand::Str(Some(id)), Cell::Str(x)) => *id == x,
            (Operand::Num(s), Cell::Int(_) | Cell::Float(_)) => {
                cmp_cell(field, c, s) == Some(std::cmp::Ordering::Equal)
            }
            _ => false,
        }),
        Test::Range(op, s) => cmp_cell(field, c, s).is_some_and(|o| op.holds(o)),
    }
}

/// The run of sorted numbers an equality or range admits, as (below, keep) predicates.
fn int_bounds<'s>(
    test_lo: Cmp,
    lo: &'s Scalar,
    hi: Option<(Cmp, &'s Scalar)>,
) -> (impl Fn(&i64) -> bool + 's, impl Fn(&i64) -> bool + 's) {
    let vs = |v: i64, s: &Scalar| match s {
        Scalar::Int(b) => Some(v.cmp(b)),
        Scalar::Float(b) => cmp_int_float(v, *b),
        _ => None,
    };
    let lower = matches!(test_lo, Cmp::Gt | Cmp::Gte);
    let below = move |v: &i64| lower && !vs(*v, lo).is_some_and(|o| test_lo.holds(o));
    let keep = move |v: &i64| {
        vs(*v, lo).is_some_and(|o| test_lo.holds(o))
            && hi.is_none_or(|(c, b)| vs(*v, b).is_some_and(|o| c.holds(o)))
    };
    (below, keep)
}

fn float_bounds<'s>(
    test_lo: Cmp,
    lo: &'s Scalar,
    hi: Option<(Cmp, &'s Scalar)>,
) -> (impl Fn(&f64) -> bool + 's, impl Fn(&f64) -> bool + 's) {
    let vs = |v: f64, s: &Scalar| match s {
        Scalar::Int(b) => cmp_int_float(*b, v).map(|o| o.reverse()),
        Scalar::Float(b) => v.partial_cmp(b),
        _ => None,
    };
    let lower = matches!(test_lo, Cmp::Gt | Cmp::Gte);
    let below = move |v: &f64| lower && !vs(*v, lo).is_some_and(|o| test_lo.holds(o));
    let keep = move |v: &f64| {
        vs(*v, lo).is_some_and(|o| test_lo.holds(o))
            && hi.is_none_or(|(c, b)| vs(*v, b).is_some_and(|o| c.holds(o)))
    };
    (below, keep)
}

impl<'a> Compiled<'a> {
    /// Whether slot `slot` passes (a slot at or past `covered` passes only filters that
    /// pass a document without fields).
    #[inline]
    pub fn test(&self, slot: u32) -> bool {
        self.test_node(&self.root, slot)
    }

    fn test_node(&self, n: &Node<'_>, slot: u32) -> bool {
        match n {
            Node::All => true,
            Node::Nothing => false,
            Node::And(ns) => ns.iter().all(|n| self.test_node(n, slot)),
            Node::Or(ns) => ns.iter().any(|n| self.test_node(n, slot)),
            Node::Not(n) => !self.test_node(n, slot),
            Node::Leaf { field, test } => leaf_test(field, test, slot),
            Node::Span { field, tests, .. } => {
                leaf_test(field, &tests[0], slot) && leaf_test(field, &tests[1], slot)
            }
        }
    }

    /// About how many slots pass (exact for a filter on one field; fields combined as if
    /// independent).
    pub fn estimate(&self) -> u64 {
        let n = f64::from(self.index.covered);
        if n == 0.0 {
            return 0;
        }
        (self.fraction(&self.root, n) * n).round() as u64
    }

    fn fraction(&self, node: &Node<'_>, n: f64) -> f64 {
        match node {
            Node::All => 1.0,
            Node::Nothing => 0.0,
            Node::And(ns) => ns.iter().map(|x| self.fraction(x, n)).product(),
            Node::Or(ns) => {
                1.0 - ns
                    .iter()
                    .map(|x| 1.0 - self.fraction(x, n))
                    .product::<f64>()
            }
            Node::Not(x) => 1.0 - self.fraction(x, n),
            Node::Leaf { field, test } => (leaf_count(field, test) as f64 / n).min(1.0),
            Node::Span { field, lo, hi, .. } => (span_count(field, lo, hi) as f64 / n).min(1.0),
        }
    }

    /// Every slot below `covered` that passes.
    pub fn collect(&self) -> RoaringBitmap {
        self.collect_node(&self.root)
    }

    fn collect_node(&self, node: &Node<'_>) -> RoaringBitmap {
        match node {
            Node::All => self.universe(),
            Node::Nothing => RoaringBitmap::new(),
            Node::And(ns) => {
                // Start from the part with the fewest slots. A part not many times larger is
                // collected too and intersected (bitmap work, a few ns a slot); the rest are
                // tested slot by slot on what is left (a column read each, tens of ns).
                let n = f64::from(self.index.covered.max(1));
                let mut parts: Vec<(f64, &Node<'_>)> =
                    ns.iter().map(|x| (self.fraction(x, n), x)).collect();
                parts.sort_by(|a, b| a.0.total_cmp(&b.0));
                let Some(&(smallest, first)) = parts.first() else {
                    return self.universe();
                };
                let mut out = self.collect_node(first);
                let mut tested = Vec::new();
                for &(f, x) in &parts[1..] {
                    if f <= intersect_within(x) * smallest && !matches!(x, Node::Not(_)) {
                        out &= self.collect_node(x);
                    } else {
                        tested.push(x);
                    }
                }
                if !tested.is_empty() {
                    out = out
                        .iter()
                        .filter(|&s| tested.iter().all(|x| self.test_node(x, s)))
                        .collect();
                }
                out
            }
            Node::Or(ns) => ns.iter().map(|x| self.collect_node(x)).union(),
            Node::Not(x) => {
                let mut all = self.universe();
                all -= self.collect_node(x);
                all
            }
            Node::Leaf { field, test } => leaf_collect(field, test, self.index.covered),
            Node::Span { field, lo, hi, .. } => {
                let mut out = span_collect(field, lo, hi);
                // A list passes when one element meets the lower bound and any (maybe
                // another) the upper: test list slots one by one.
                for s in &field.lists {
                    if self.test_node(node, s) {
                        out.insert(s);
                    }
                }
                out
            }
        }
    }

    fn universe(&self) -> RoaringBitmap {
        let mut all = RoaringBitmap::new();
        all.insert_range(0..self.index.covered);
        all
    }
}

/// How many times the smallest part of an `$and` `node` may be and still be collected.
fn intersect_within(node: &Node<'_>) -> f64 {
    let numeric = |field: &FieldIndex, s: &Scalar| {
        matches!(s, Scalar::Int(_) | Scalar::Float(_))
            && (!field.int_slots_kept || field.floats.values.len() + field.floats.tail.len() > 0)
    };
    match node {
        Node::Leaf {
            field,
            test: Test::Range(_, s),
        }
        | Node::Span {
            field, lo: (_, s), ..
        } if numeric(field, s) => INTERSECT_SORTED_WITHIN,
        Node::Leaf {
            field,
            test: Test::Eq(ops),
        } if ops
            .iter()
            .any(|o| matches!(o, Operand::Num(s) if numeric(field, s))) =>
        {
            INTERSECT_SORTED_WITHIN
        }
        Node::Leaf { .. } | Node::Span { .. } => INTERSECT_WITHIN,
        _ => INTERSECT_SORTED_WITHIN,
    }
}

fn leaf_test(field: &FieldIndex, test: &Test, slot: u32) -> bool {
    match (field.cell(slot), test) {
        (Cell::Missing, Test::Exists(b)) => !*b,
        (Cell::Missing, _) => false,
        (_, Test::Exists(b)) => *b,
        (Cell::List(i), t) => {
            let (start, len) = field.spans[i as usize];
            field.items[start as usize..(start + len) as usize]
                .iter()
                .any(|&c| scalar_passes(field, c, t))
        }
        (c, t) => scalar_passes(field, c, t),
    }
}

fn span_count(field: &FieldIndex, lo: &(Cmp, Scalar), hi: &(Cmp, Scalar)) -> u64 {
    match &lo.1 {
        Scalar::Str(a) => field
            .strings
            .iter()
            .zip(&field.string_slots)
            .filter(|(k, _)| span_holds_str(k, lo, hi, a))
            .map(|(_, b)| b.len())
            .sum(),
        _ => num_count(field, lo.0, &lo.1, Some((hi.0, &hi.1))),
    }
}

fn span_holds_str(k: &str, lo: &(Cmp, Scalar), hi: &(Cmp, Scalar), a: &str) -> bool {
    lo.0.holds(k.as_bytes().cmp(a.as_bytes()))
        && matches!(&hi.1, Scalar::Str(b) if hi.0.holds(k.as_bytes().cmp(b.as_bytes())))
}

fn span_collect(field: &FieldIndex, lo: &(Cmp, Scalar), hi: &(Cmp, Scalar)) -> RoaringBitmap {
    let mut out = RoaringBitmap::new();
    match &lo.1 {
        Scalar::Str(a) => {
            out = field
                .strings
                .iter()
                .zip(&field.string_slots)
                .filter(|(k, _)| span_holds_str(k, lo, hi, a))
                .map(|(_, b)| b)
                .union();
        }
        _ => num_collect(field, lo.0, &lo.1, Some((hi.0, &hi.1)), &mut out),
    }
    out
}

fn num_count(field: &FieldIndex, lo: Cmp, a: &Scalar, hi: Option<(Cmp, &Scalar)>) -> u64 {
    let (b, k) = int_bounds(lo, a, hi);
    let (fb, fk) = float_bounds(lo, a, hi);
    let ints = if field.int_slots_kept {
        kept_ints(field, lo, a, hi)
            .filter(|(v, _)| k(v))
            .map(|(_, s)| s.len())
            .sum()
    } else {
        field.ints.count(b, k)
    };
    ints + field.floats.count(fb, fk)
}

/// The integers of `field.int_slots` a range may admit: a run of the map, from the lower
/// bound's floor to the upper's ceiling (a superset: each is still tested), so an equality or
/// a narrow range looks at a few keys, not every distinct integer of the field.
fn kept_ints<'f>(
    field: &'f FieldIndex,
    lo: Cmp,
    a: &Scalar,
    hi: Option<(Cmp, &Scalar)>,
) -> std::collections::btree_map::Range<'f, i64, RoaringBitmap> {
    use std::ops::Bound::{Included, Unbounded};
    // `as i64` saturates; a NaN bound admits nothing, so any run is a superset for it.
    let floor = |s: &Scalar| match s {
        Scalar::Int(b) => Some(*b),
        Scalar::Float(f) => Some(f.floor() as i64),
        _ => None,
    };
    let ceil = |s: &Scalar| match s {
        Scalar::Int(b) => Some(*b),
        Scalar::Float(f) => Some(f.ceil() as i64),
        _ => None,
    };
    let from = match lo {
        Cmp::Gt | Cmp::Gte => floor(a),
        Cmp::Lt | Cmp::Lte => None,
    };
    let to = match (lo, hi) {
        (Cmp::Lt | Cmp::Lte, _) => ceil(a),
        (_, Some((Cmp::Lt | Cmp::Lte, b))) => ceil(b),
        _ => None,
    };
    match (from, to) {
        // An empty range (BTreeMap::range panics on a reversed one).
        (Some(f), Some(t)) if f > t => field.int_slots.range(0..0),
        (f, t) => field
            .int_slots
            .range((f.map_or(Unbounded, Included), t.map_or(Unbounded, Included))),
    }
}

fn num_collect(
    field: &FieldIndex,
    lo: Cmp,
    a: &Scalar,
    hi: Option<(Cmp, &Scalar)>,
    out: &mut RoaringBitmap,
) {
    let (b, k) = int_bounds(lo, a, hi);
    if field.int_slots_kept {
        // One union of many bitmaps (pairwise `|=` would merge a growing array each time).
        let parts = kept_ints(field, lo, a, hi)
            .filter(|(v, _)| k(v))
            .map(|(_, s)| s);
        *out |= parts.union();
    } else {
        field.ints.collect(b, k, out);
    }
    let (fb, fk) = float_bounds(lo, a, hi);
    field.floats.collect(fb, fk, out);
}

fn string_range<'a>(
    field: &'a FieldIndex,
    op: Cmp,
    s: &'a str,
) -> impl Iterator<Item = &'a RoaringBitmap> {
    field
        .strings
        .iter()
        .zip(&field.string_slots)
        .filter(move |(k, _)| op.holds(k.as_bytes().cmp(s.as_bytes())))
        .map(|(_, b)| b)
}

fn leaf_count(field: &FieldIndex, test: &Test) -> u64 {
    match test {
        Test::Exists(true) => field.present.len(),
        Test::Exists(false) => (field.cells.len() as u64).saturating_sub(field.present.len()),
        Test::Eq(ops) => ops
            .iter()
            .map(|o| match o {
                Operand::Null => field.nulls.len(),
                Operand::Bool(true) => field.trues.len(),
                Operand::Bool(false) => field.falses.len(),
                Operand::Str(Some(id)) => field.string_slots[*id as usize].len(),
                Operand::Str(None) => 0,
                Operand::Num(s) => num_count(field, Cmp::Gte, s, Some((Cmp::Lte, s))),
            })
            .sum(),
        Test::Range(op, s @ (Scalar::Int(_) | Scalar::Float(_))) => num_count(field, *op, s, None),
        Test::Range(op, Scalar::Str(x)) => string_range(field, *op, x).map(|b| b.len()).sum(),
        Test::Range(..) => 0,
    }
}

fn leaf_collect(field: &FieldIndex, test: &Test, covered: u32) -> RoaringBitmap {
    let mut out = RoaringBitmap::new();
    match test {
        Test::Exists(true) => out |= &field.present,
        Test::Exists(false) => {
            out.insert_range(0..covered);
            out -= &field.present;
        }
        Test::Eq(ops) => {
            // Bitmaps of the operands, united at once ($in may name many).
            let mut parts: Vec<&RoaringBitmap> = Vec::with_capacity(ops.len());
            for o in ops {
                match o {
                    Operand::Null => parts.push(&field.nulls),
                    Operand::Bool(true) => parts.push(&field.trues),
                    Operand::Bool(false) => parts.push(&field.falses),
                    Operand::Str(Some(id)) => parts.push(&field.string_slots[*id as usize]),
                    Operand::Str(None) => {}
                    Operand::Num(s) => {
                        num_collect(field, Cmp::Gte, s, Some((Cmp::Lte, s)), &mut out)
                    }
                }
            }
            out |= parts.into_iter().union();
        }
        Test::Range(op, s @ (Scalar::Int(_) | Scalar::Float(_))) => {
            num_collect(field, *op, s, None, &mut out)
        }
        Test::Range(op, Scalar::Str(x)) => out = string_range(field, *op, x).union(),
        Test::Range(..) => {}
    }
    out
}

/// Slots below which an index build stays on one thread.
const PARALLEL_SLOTS: u32 = 1 << 16;

/// [`index_slots`] over `from..to`, split into one slice per CPU (up to 8) when the range is
/// large: each slice is indexed on its own thread into fields of its own, then merged in
/// slot order (strings re-interned, side tables offset).
fn index_parallel(
    fields: &mut BTreeMap<String, FieldIndex>,
    from: u32,
    to: u32,
    src: &(dyn DocSource + Sync),
) -> Result<()> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(8)) as u32;
    if threads <= 1 || to.saturating_sub(from) < PARALLEL_SLOTS || fields.is_empty() {
        return index_slots(fields, from, to, src);
    }
    let step = (to - from).div_ceil(threads);
    let names: Vec<String> = fields.keys().cloned().collect();
    let parts: Vec<Result<BTreeMap<String, FieldIndex>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (1..threads)
            .map(|t| {
                let names = &names;
                let (a, b) = (from + t * step, (from + (t + 1) * step).min(to));
                scope.spawn(move || {
                    let mut part: BTreeMap<String, FieldIndex> = names
                        .iter()
                        .map(|n| {
                            let f = FieldIndex {
                                base: a,
                                ..FieldIndex::default()
                            };
                            (n.clone(), f)
                        })
                        .collect();
                    index_slots(&mut part, a, b, src).map(|()| part)
                })
            })
            .collect();
        let first = index_slots(fields, from, (from + step).min(to), src);
        let mut out: Vec<Result<BTreeMap<String, FieldIndex>>> =
            vec![first.map(|()| BTreeMap::new())];
        for h in handles {
            out.push(h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
        }
        out
    });
    for (i, part) in parts.into_iter().enumerate() {
        let part = part?;
        if i == 0 {
            continue;
        }
        for (name, other) in part {
            if let Some(f) = fields.get_mut(&name) {
                f.merge(other);
            }
        }
    }
    Ok(())
}

/// Adds slots `from..to` of every field in `fields`, reading each document once.
fn index_slots(
    fields: &mut BTreeMap<String, FieldIndex>,
    from: u32,
    to: u32,
    src: &dyn DocSource,
) -> Result<()> {
    if fields.is_empty() {
        return Ok(());
    }
    for f in fields.values_mut() {
        let have = f.base as usize + f.cells.len();
        f.cells.reserve((to as usize).saturating_sub(have));
    }
    for slot in from..to {
        let doc = src.doc(slot)?;
        if doc.is_empty() {
            continue;
        }
        // Both sides are sorted by key bytes: one merge pass.
        let mut wanted = fields.iter_mut().peekable();
        for (k, v) in doc.fields() {
            while wanted
                .peek()
                .is_some_and(|(name, _)| name.as_bytes() < k.as_bytes())
            {
                wanted.next();
            }
            match wanted.peek_mut() {
                Some((name, fi)) if name.as_str() == k => fi.add(slot, Some(v)),
                Some(_) => {}
                None => break,
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::metadata::{encode, parse_json};

    struct Docs(Vec<Vec<u8>>);

    impl DocSource for Docs {
        fn doc(&self, slot: u32) -> Result<DocRef<'_>> {
            DocRef::new(&self.0[slot as usize], 0)
        }
    }

    fn docs(jsons: &[&str]) -> Docs {
        Docs(
            jsons
                .iter()
                .map(|j| encode(&parse_json(j).unwrap()).unwrap())
                .collect(),
        )
    }

    /// A range of 150,000 slots is indexed on several threads and merged; the result answers
    /// every filter as an index built slot by slot on one thread does.
    #[test]
    fn a_parallel_build_equals_a_serial_one() {
        let n = 150_000u32;
        let d = Docs(
            (0..n)
                .map(|i| {
                    let json = match i % 7 {
                        0 => r#"{}"#.to_string(),
                        1 => format!(r#"{{"a": {}, "s": "v{}"}}"#, i % 90, i % 13),
                        2 => format!(r#"{{"a": {}.5, "t": ["x{}", "y"]}}"#, i % 40, i % 5),
                        3 => format!(r#"{{"s": "w{}", "b": {}}}"#, i % 3000, i % 2 == 0),
                        4 => format!(r#"{{"a": {}, "n": null}}"#, i),
                        5 => format!(r#"{{"t": [{}, "x1"], "s": "v{}"}}"#, i % 9, i % 17),
                        _ => format!(r#"{{"a": [{}, {}]}}"#, i % 50, i % 7),
                    };
                    encode(&parse_json(&json).unwrap()).unwrap()
                })
                .collect(),
        );
        let filters = [
            r#"{"a": {"$gte": 10, "$lt": 30}}"#,
            r#"{"a": 5}"#,
            r#"{"a": {"$gt": 100000}}"#,
            r#"{"s": "v3"}"#,
            r#"{"s": {"$gt": "w2"}}"#,
            r#"{"t": {"$contains": "x1"}}"#,
            r#"{"t": 4}"#,
            r#"{"b": true}"#,
            r#"{"n": {"$exists": true}}"#,
            r#"{"$or": [{"s": "w7"}, {"a": 2.5}]}"#,
        ];
        let names = ["a", "b", "n", "s", "t"];
        let mut parallel = FilterIndex::new();
        parallel.prepare(&names[..2], n / 3, &d).unwrap();
        parallel.prepare(&names, n, &d).unwrap();
        let mut serial = FilterIndex::new();
        index_slots(&mut serial.fields, 0, 0, &d).unwrap();
        serial.fields = names
            .iter()
            .map(|k| (k.to_string(), FieldIndex::default()))
            .collect();
        index_slots(&mut serial.fields, 0, n, &d).unwrap();
        serial.covered = n;
        for f in serial.fields.values_mut() {
            f.settle();
        }
        for text in filters {
            let f = Filter::parse(text).unwrap();
            let (p, q) = (parallel.compile(&f), serial.compile(&f));
            assert_eq!(p.collect(), q.collect(), "{text}");
            assert_eq!(p.estimate(), q.estimate(), "{text}");
            for slot in (0..n).step_by(97) {
                assert_eq!(p.test(slot), q.test(slot), "{text} slot {slot}");
                assert_eq!(
                    p.test(slot),
                    f.matches(&d.doc(slot).unwrap()),
                    "{text} slot {slot}"
                );
            }
        }
    }

    #[test]
    fn index_agrees_with_matching_document_by_document() {
        let d = docs(&[
            r#"{"a": 1, "t": ["x", "y"], "s": "m"}"#,
            r#"{"a": 2.5, "t": ["y"], "s": "b", "n": null}"#,
            r#"{"a": -3, "t": [], "b": true}"#,
            r#"{}"#,
            r#"{"a": "text", "t": "x", "b": false}"#,
            r#"{"a": [4, 5.5], "s": "zz"}"#,
        ]);
        let mut ix = FilterIndex::new();
        for f in [
            r#"{"a": 1}"#,
            r#"{"a": {"$gt": 1}}"#,
            r#"{"a": {"$gte": 1, "$lt": 5}}"#,
            // Two bounds on a list may be met by different elements (slot 5: [4, 5.5]).
            r#"{"a": {"$gt": 4.5, "$lt": 5}}"#,
            r#"{"s": {"$gte": "b", "$lt": "n"}}"#,
            r#"{"a": {"$lte": 2.5}}"#,
            r#"{"a": {"$ne": 1}}"#,
            r#"{"a": {"$in": [2.5, 5, "text"]}}"#,
            r#"{"t": "y"}"#,
            r#"{"t": {"$nin": ["x"]}}"#,
            r#"{"s": {"$gt": "c"}}"#,
            r#"{"n": null}"#,
            r#"{"n": {"$exists": false}}"#,
            r#"{"b": true}"#,
            r#"{"$or": [{"b": false}, {"a": {"$lt": 0}}]}"#,
            r#"{"$not": {"t": {"$exists": true}}}"#,
            r#"{"zz": {"$exists": false}}"#,
            r#"{"zz": 1}"#,
            r#"{"$and": [{"t": "x"}, {"s": "m"}]}"#,
        ] {
            let filter = Filter::parse(f).unwrap();
            ix.prepare(&filter.fields(), 6, &d).unwrap();
            let c = ix.compile(&filter);
            let got = c.collect();
            for s in 0..6u32 {
                let want = filter.matches(&d.doc(s).unwrap());
                assert_eq!(c.test(s), want, "{f} test slot {s}");
                assert_eq!(got.contains(s), want, "{f} collect slot {s}");
            }
            // Exact for one field; a list's elements count one by one, so at least.
            if matches!(filter, Filter::Field(..)) {
                assert!(c.estimate() >= got.len(), "{f} estimate");
            }
        }
    }

    /// Integers of a field with few distinct ones are kept as a bitmap each; a range or an
    /// equality reads the run of keys its bounds admit (float bounds, reversed and unbounded
    /// ranges included), and an `$and` may collect a part up to 64 times its smallest.
    #[test]
    fn kept_integers_answer_ranges_by_their_run_of_keys() {
        let texts: Vec<String> = (0..200)
            .map(|i| {
                let t = if i % 7 == 0 { r#"["x"]"# } else { r#"["y"]"# };
                format!(r#"{{"i": {}, "t": {t}}}"#, (i * 13) % 40 - 5)
            })
            .collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let d = docs(&refs);
        let mut ix = FilterIndex::new();
        for f in [
            r#"{"i": 7}"#,
            r#"{"i": 7.5}"#,
            r#"{"i": 7.0}"#,
            r#"{"i": {"$gt": 6.5, "$lte": 9}}"#,
            r#"{"i": {"$gt": 7.2, "$lt": 7.8}}"#,
            r#"{"i": {"$gt": 9, "$lt": 3}}"#,
            r#"{"i": {"$gte": 3, "$lte": 3}}"#,
            r#"{"i": {"$gt": 3, "$lt": 4}}"#,
            r#"{"i": {"$gte": -1e300}}"#,
            r#"{"i": {"$lt": 1e300}}"#,
            r#"{"i": {"$lt": -5}}"#,
            r#"{"i": {"$lte": -5}}"#,
            r#"{"i": {"$gt": 9223372036854775807}}"#,
            r#"{"i": {"$lt": -9223372036854775808}}"#,
            r#"{"i": {"$in": [1, 2.5, 34]}}"#,
            r#"{"$and": [{"t": "x"}, {"i": {"$gte": 3}}]}"#,
            r#"{"$and": [{"t": "y"}, {"i": {"$gte": 3, "$lt": 4}}]}"#,
        ] {
            let filter = Filter::parse(f).unwrap();
            ix.prepare(&filter.fields(), 200, &d).unwrap();
            let c = ix.compile(&filter);
            let got = c.collect();
            let mut want_count = 0;
            for s in 0..200u32 {
                let want = filter.matches(&d.doc(s).unwrap());
                want_count += u64::from(want);
                assert_eq!(c.test(s), want, "{f} test slot {s}");
                assert_eq!(got.contains(s), want, "{f} collect slot {s}");
            }
            if matches!(filter, Filter::Field(..)) {
                assert_eq!(c.estimate(), want_count, "{f} estimate");
            }
        }
    }
}
