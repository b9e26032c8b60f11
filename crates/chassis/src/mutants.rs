//! Protocol mutants: deliberate breaks of the commit protocol that the power-loss simulator
//! must catch (crash-safety issue, item 9).
//!
//! They exist only with the `mutants` feature, which only the crate's own tests enable (through
//! a dev-dependency on itself) and which refuses to compile without debug assertions, so no
//! release build can reach them. Without the feature [`active`] is a constant `false` and every
//! check folds away. A mutant is switched on per thread, so tests running in parallel in one
//! binary never see each other's mutants.

#[cfg(all(feature = "mutants", not(debug_assertions)))]
compile_error!("the `mutants` feature is for the test suite only; never build it in release");

/// One protocol break.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(not(feature = "mutants"), allow(dead_code))]
pub enum Mutant {
    /// Writes the commit header without first making the data (or the marks) durable.
    NoSyncBeforeCommitHeader,
    /// A delete flush writes its marks with no intent header before them.
    NoIntentHeader,
    /// A delete flush writes its marks before the intent header is durable.
    NoSyncBetweenIntentAndMarks,
    /// Commits overwrite the copy holding the newest header instead of the other one.
    HeaderCopiesDontAlternate,
    /// Opening with write access never runs recovery.
    RecoveryDisabled,
    /// Recovery writes its clean header but keeps the uncommitted delete marks.
    RecoveryKeepsMarks,
    /// An add writes its slot's id and metadata but leaves the old deleted epoch in place.
    AddKeepsDeletedEpoch,
    /// Header decoding skips the checksum comparison.
    ChecksumNotChecked,
    /// A flush returns before its last fsync (the header's) has been issued.
    AckBeforeLastSync,
    /// A failed fsync is retried, and a retry that succeeds is taken as success (no poison).
    RetryFailedSync,
    /// Commits leave the metadata heap's free position where the previous commit had it, so
    /// the next writer writes over committed metadata.
    MetadataHeapNotCommitted,
    /// A writer that opened a cleanly closed file changes lists without first making the
    /// replacement of the clean-close marker durable.
    ListsChangedUnderCleanMarker,
    /// Every commit gives the file a new identity instead of keeping the one it has.
    IdentityNotKept,
    /// Flushes commit the user version the file already had instead of the one set since.
    UserVersionNotCommitted,
    /// Flushes commit the full-text root the file already had: the documents added since are
    /// committed without their postings (and deleted ones still count in the statistics).
    TextRootNotCommitted,
    /// Stored postings say a term is in a document more often than it is: postings that
    /// disagree with the documents committed beside them.
    TextPostingsWrong,
    /// Incremental sync takes a destination whose identity differs from the source's as an
    /// earlier state of it (caught by the backup tests, not by the power-loss simulator:
    /// it is not in [`Mutant::ALL`]).
    SyncIgnoresIdentity,
}

#[cfg_attr(not(feature = "mutants"), allow(dead_code))]
impl Mutant {
    /// Every mutant, in the order the simulator reports them.
    pub const ALL: [Mutant; 16] = [
        Mutant::NoSyncBeforeCommitHeader,
        Mutant::NoIntentHeader,
        Mutant::NoSyncBetweenIntentAndMarks,
        Mutant::HeaderCopiesDontAlternate,
        Mutant::RecoveryDisabled,
        Mutant::RecoveryKeepsMarks,
        Mutant::AddKeepsDeletedEpoch,
        Mutant::ChecksumNotChecked,
        Mutant::AckBeforeLastSync,
        Mutant::RetryFailedSync,
        Mutant::MetadataHeapNotCommitted,
        Mutant::ListsChangedUnderCleanMarker,
        Mutant::IdentityNotKept,
        Mutant::UserVersionNotCommitted,
        Mutant::TextRootNotCommitted,
        Mutant::TextPostingsWrong,
    ];
}

#[cfg(feature = "mutants")]
thread_local! {
    static ACTIVE: std::cell::Cell<Option<Mutant>> = const { std::cell::Cell::new(None) };
}

/// Switches `m` on (or every mutant off with `None`) for the calling thread.
#[cfg(feature = "mutants")]
pub fn set(m: Option<Mutant>) {
    ACTIVE.with(|a| a.set(m));
}

/// Whether `m` is switched on for the calling thread.
#[cfg(feature = "mutants")]
#[inline]
pub fn active(m: Mutant) -> bool {
    ACTIVE.with(|a| a.get() == Some(m))
}

/// Whether `m` is switched on: never, in a build without the `mutants` feature.
#[cfg(not(feature = "mutants"))]
#[inline(always)]
pub(crate) const fn active(_m: Mutant) -> bool {
    false
}
