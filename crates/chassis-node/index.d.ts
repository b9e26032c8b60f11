// Types of the `chassis` package (the JavaScript layer in index.js over the native addon,
// whose own generated declarations are native.d.ts). Checked by `tsc` in the tests.

/** Vectors: a Float32Array of rows × dims (used in place: don't change it until the Promise
 * settles), another typed array, one vector as an array of numbers, or an array of vectors. */
export type Vectors = Float32Array | ArrayLike<number> | ArrayLike<ArrayLike<number>>
/** Ids: one id or several, as BigInts or safe integers. */
export type Ids = bigint | number | BigUint64Array | BigInt64Array | Array<bigint | number>
/** A metadata document: string keys to null, booleans, numbers, strings, or lists of those. */
export type Metadata = Record<string, unknown>
/** A filter in Chassis's filter language (docs/FILTERS.md), e.g. `{ tenant: 'acme' }`. */
export type Filter = Record<string, unknown>
export type Metric = 'cosine' | 'l2' | 'ip'

/** A metadata field indexed for full-text search. */
export interface TextField {
  name: string
  /** English Snowball stemming. */
  stem?: boolean
  /** Leave out Lucene's English stop words. */
  stopWords?: boolean
  /** Lowercase every term (default true). */
  lowercase?: boolean
}

export interface CreateOptions {
  dims: number
  metric?: Metric
  M?: number
  efConstruction?: number
  /** 3 (f32 vectors), 4 (split halves side by side), 5 (half precision) or 6 (planar split halves, the default). */
  format?: 3 | 4 | 5 | 6
  codes?: CodeKind
  precision?: 'f32' | 'f16'
  /** Metadata fields indexed for full-text and hybrid search. */
  textFields?: Array<string | TextField>
}

export interface SearchOptions {
  /** Results per query (default 10). */
  k?: number
  /** Beam width (default max(64, k)). */
  ef?: number
  /** One filter for every query, or one per query (null: none). */
  filter?: Filter | Array<Filter | null>
  /** Threads for a batch: 0 every core (default for several queries), 1 the calling one. */
  threads?: number
}

export interface HybridOptions extends SearchOptions {
  /** One query text per query vector: a hybrid search. */
  text: string | string[]
  fusion?: 'rrf' | 'relative_score'
  /** [vector, text] weights (default [1, 1]). */
  weights?: [number, number]
  /** Candidates each leg returns (default max(k, 50)). */
  depth?: number
  /** RRF's k (default 60). */
  rrfK?: number
  /** Also return each leg's ranks and scores. */
  returnLegs?: boolean
}

export interface SearchResult {
  /** rows × k ids, padded with MISSING_ID. */
  ids: BigUint64Array
  /** rows × k distances (nearest first), padded with Infinity. */
  distances: Float32Array
  rows: number
  k: number
}

export interface TextResult {
  /** rows × k ids, padded with MISSING_ID. */
  ids: BigUint64Array
  /** rows × k BM25 scores (best first), padded with -Infinity. */
  scores: Float32Array
  rows: number
  k: number
}

export interface HybridResult {
  ids: BigUint64Array
  /** Fused scores, higher is better; -Infinity where padded. */
  scores: Float32Array
  /** With `returnLegs`: each leg's rank (from 1; 0 where it did not return the hit) and own
   * score (NaN where it did not). */
  legs?: {
    vectorRanks: Uint32Array
    vectorDistances: Float32Array
    textRanks: Uint32Array
    textScores: Float32Array
  }
  rows: number
  k: number
}

export interface CompactOptions {
  M?: number
  efConstruction?: number
  threads?: number
  format?: 3 | 4 | 5 | 6
  codes?: CodeKind
  keepGraph?: boolean
  /** Without `format`, a file that already stores this precision keeps its format; f16 is format 5, f32 from a half precision file format 6 (4 with codes). */
  precision?: 'f32' | 'f16'
}

export interface BackupReport {
  sequence: number
  previousSequence: number | null
  live: number
  bytesShipped: number
  bytesCompared: number
  committedBytes: number
  unchanged: boolean
  fullCopy: boolean
  replacedBecause: string | null
  repairedLists: number | null
}

/** An HNSW index in one Chassis file. */
export declare class Index implements Disposable, AsyncDisposable {
  private constructor()
  /** Creates a new index file (which must not exist) and opens it as the writer. */
  static create(path: string, options: CreateOptions): Promise<Index>
  static createSync(path: string, options: CreateOptions): Index
  /** Opens an index file: as the writer (an exclusive lock), or `{ readOnly: true }`, a
   * lock-free reader that sees every flush. */
  static open(path: string, options?: { readOnly?: boolean }): Promise<Index>
  static openSync(path: string, options?: { readOnly?: boolean }): Index
  /** Converts an hnswlib 0.7/0.8 file into a new Chassis file (labels become ids). */
  static migrateHnswlib(src: string, dst: string, metric: Metric): Promise<Index>
  readonly path: string
  readonly dims: number
  readonly metric: Metric
  readonly readOnly: boolean
  readonly closed: boolean
  /** Live vectors. */
  readonly size: number
  has(id: bigint | number): boolean
  /** Adds vectors; resolves to their ids. All or nothing. */
  add(
    vectors: Vectors,
    options?: { ids?: Ids; metadata?: Metadata | Array<Metadata | null>; threads?: number },
  ): Promise<BigUint64Array>
  /** Stores each row under its id: added where not live, replaced where live. */
  upsert(vectors: Vectors, options: { ids: Ids; metadata?: Metadata | Array<Metadata | null> }): Promise<void>
  setMetadata(ids: Ids, metadata: Metadata | Array<Metadata | null>): Promise<void>
  getMetadata(id: bigint | number): Metadata
  getMetadata(ids: BigUint64Array | Array<bigint | number>): Metadata[]
  get(id: bigint | number): Float32Array
  get(ids: BigUint64Array | Array<bigint | number>): Float32Array[]
  /** Deletes every id, or none if one is not live. */
  delete(ids: Ids): Promise<void>
  search(queries: Vectors, options: HybridOptions): Promise<HybridResult>
  search(queries: Vectors, options?: SearchOptions): Promise<SearchResult>
  searchSync(queries: Vectors, options?: SearchOptions): SearchResult
  /** BM25's k best live documents for each text. */
  searchText(texts: string | string[], options?: { k?: number; filter?: Filter | Array<Filter | null>; threads?: number }): Promise<TextResult>
  searchTextSync(texts: string | string[], options?: { k?: number; filter?: Filter | Array<Filter | null> }): TextResult
  readonly textFields: TextField[]
  setTextFields(fields: Array<string | TextField>): Promise<void>
  flush(): Promise<void>
  flushSync(): void
  rollback(): void
  userVersion: bigint
  compact(options?: CompactOptions): Promise<void>
  backup(dst: string): Promise<BackupReport>
  info(): Record<string, unknown>
  /** Closes the index; unflushed changes are discarded. */
  close(): void
  [Symbol.dispose](): void
  [Symbol.asyncDispose](): Promise<void>
}

/** Several shard files searched as one. */
export declare class Collection implements Disposable, AsyncDisposable {
  private constructor()
  static create(path: string, options: CreateOptions & { shards?: number }): Promise<Collection>
  static open(path: string, options?: { readOnly?: boolean }): Promise<Collection>
  readonly dims: number
  readonly size: number
  has(id: bigint | number): boolean
  add(vectors: Vectors, options?: { ids?: Ids; metadata?: Metadata | Array<Metadata | null> }): Promise<BigUint64Array>
  upsert(vectors: Vectors, options: { ids: Ids; metadata?: Metadata | Array<Metadata | null> }): Promise<void>
  setMetadata(ids: Ids, metadata: Metadata | Array<Metadata | null>): Promise<void>
  getMetadata(id: bigint | number): Metadata
  getMetadata(ids: BigUint64Array | Array<bigint | number>): Metadata[]
  get(id: bigint | number): Float32Array
  get(ids: BigUint64Array | Array<bigint | number>): Float32Array[]
  delete(ids: Ids): Promise<void>
  search(queries: Vectors, options?: { k?: number; ef?: number; filter?: Filter; threads?: number }): Promise<SearchResult>
  flush(): Promise<void>
  refresh(): boolean
  info(): Record<string, unknown>
  close(): void
  [Symbol.dispose](): void
  [Symbol.asyncDispose](): Promise<void>
}

/** The Chassis id a string id is stored under (as the Python LangChain store's). */
export declare function chassisId(id: string): bigint
/** The shard of each id among `shards`, as a Collection routes them. */
export declare function shardOf(ids: Ids, shards: number): Uint32Array
export declare const MISSING_ID: bigint
export declare const MAX_PADDED_K: number
/** Every kind of compact code an index can keep (`codes` of create, compact and Collection). */
export declare const CODE_KINDS: readonly CodeKind[]
/** A kind of compact code: none, one byte a dimension, or half a byte. */
export type CodeKind = 'none' | 'int8' | 'int4'

export declare class ChassisError extends Error {
  /** A stable code, e.g. "CHASSIS_LOCKED". */
  readonly code: string
}
export declare class CorruptError extends ChassisError {}
export declare class NotChassisFileError extends CorruptError {}
export declare class TooNewError extends ChassisError {}
export declare class LockedError extends ChassisError {}
export declare class PoisonedError extends ChassisError {}
export declare class ReadOnlyError extends ChassisError {}
export declare class DimensionMismatchError extends ChassisError {}
export declare class InvalidVectorError extends ChassisError {}
export declare class DuplicateIdError extends ChassisError {}
export declare class NotFoundError extends ChassisError {}
export declare class InvalidArgumentError extends ChassisError {}
export declare class IdsExhaustedError extends InvalidArgumentError {}
export declare class FullError extends ChassisError {}
export declare class StorageError extends ChassisError {}
