'use strict'
// Chassis for Node.js: the public API over the native addon (src/lib.rs, napi-rs). This layer
// checks and converts arguments (typed arrays, BigInt ids, metadata objects as JSON), turns
// native errors into ChassisError subclasses with a stable `code`, and gives each handle
// Symbol.dispose / Symbol.asyncDispose. Everything that can take time returns a Promise and
// runs on libuv's thread pool; the `*Sync` twins run on the calling thread.

const fs = require('fs')
const path = require('path')

function loadNative() {
  const { platform, arch } = process
  const names = [
    `chassis.${platform}-${arch}-gnu.node`,
    `chassis.${platform}-${arch}-musl.node`,
    `chassis.${platform}-${arch}.node`,
    'chassis.node',
  ]
  for (const name of names) {
    const file = path.join(__dirname, name)
    if (fs.existsSync(file)) {
      return require(file)
    }
  }
  throw new Error(
    `chassis: no native module for ${platform}-${arch} in ${__dirname} ` +
      '(build it with `bash scripts/node-pack` from the repository)',
  )
}

const native = loadNative()

/** The id `search` puts where fewer than k results exist (its distance is Infinity). */
const MISSING_ID = (1n << 64n) - 1n
/** Answers are padded to k columns for any k up to this (larger k: the live count). */
const MAX_PADDED_K = 65536
/** Every kind of compact code an index can keep (`codes` of create, compact, Collection). */
const CODE_KINDS = Object.freeze(native.codeKinds())

class ChassisError extends Error {
  constructor(message, code = 'CHASSIS_ERROR') {
    super(message)
    this.name = new.target.name
    this.code = code
  }
}
class CorruptError extends ChassisError {}
class NotChassisFileError extends CorruptError {}
class TooNewError extends ChassisError {}
class LockedError extends ChassisError {}
class PoisonedError extends ChassisError {}
class ReadOnlyError extends ChassisError {}
class DimensionMismatchError extends ChassisError {}
class InvalidVectorError extends ChassisError {}
class DuplicateIdError extends ChassisError {}
class NotFoundError extends ChassisError {}
class InvalidArgumentError extends ChassisError {}
class IdsExhaustedError extends InvalidArgumentError {}
class FullError extends ChassisError {}
class StorageError extends ChassisError {}

const ERRORS = {
  CORRUPT: CorruptError,
  NOT_CHASSIS_FILE: NotChassisFileError,
  TOO_NEW: TooNewError,
  LOCKED: LockedError,
  POISONED: PoisonedError,
  READ_ONLY: ReadOnlyError,
  DIMENSION_MISMATCH: DimensionMismatchError,
  INVALID_VECTOR: InvalidVectorError,
  DUPLICATE_ID: DuplicateIdError,
  NOT_FOUND: NotFoundError,
  INVALID_ARGUMENT: InvalidArgumentError,
  IDS_EXHAUSTED: IdsExhaustedError,
  FULL: FullError,
  STORAGE: StorageError,
}

/** A native error ("[CODE] message") as its ChassisError subclass; others unchanged. */
function convert(e) {
  if (e instanceof ChassisError || !(e instanceof Error)) return e
  const m = /^\[([A-Z_]+)\] ([\s\S]*)$/.exec(e.message)
  if (!m || !ERRORS[m[1]]) return e
  return new ERRORS[m[1]](m[2], `CHASSIS_${m[1]}`)
}

function call(f) {
  try {
    return f()
  } catch (e) {
    throw convert(e)
  }
}

async function callAsync(f) {
  try {
    return await call(f)
  } catch (e) {
    throw convert(e)
  }
}

function invalid(msg) {
  return new InvalidArgumentError(msg, 'CHASSIS_INVALID_ARGUMENT')
}

/** `x` as rows of `dims` floats: a Float32Array (used in place, no copy), any other typed
 * array or an array of numbers (one vector) or of vectors (copied). */
function matrix(x, dims, what) {
  let flat
  if (x instanceof Float32Array) {
    flat = x
  } else if (ArrayBuffer.isView(x) && !(x instanceof DataView)) {
    if (typeof x[0] === 'bigint') throw new TypeError(`${what} must hold numbers, not BigInts`)
    flat = Float32Array.from(x)
  } else if (Array.isArray(x)) {
    if (x.length > 0 && (Array.isArray(x[0]) || ArrayBuffer.isView(x[0]))) {
      flat = new Float32Array(x.length * dims)
      x.forEach((row, i) => {
        if (row.length !== dims) {
          throw new DimensionMismatchError(
            `${what}: row ${i} has ${row.length} dimensions, the index has ${dims}`,
            'CHASSIS_DIMENSION_MISMATCH',
          )
        }
        flat.set(row, i * dims)
      })
    } else {
      for (const v of x) {
        if (typeof v !== 'number') throw new TypeError(`${what} must hold numbers`)
      }
      flat = Float32Array.from(x)
    }
  } else {
    throw new TypeError(`${what} must be a Float32Array, a typed array, or an array of vectors`)
  }
  if (dims === 0 || flat.length % dims !== 0) {
    throw new DimensionMismatchError(
      `${what}: ${flat.length} floats are not whole rows of ${dims} dimensions`,
      'CHASSIS_DIMENSION_MISMATCH',
    )
  }
  return { data: flat, rows: flat.length / dims }
}

function bigintId(v, what) {
  if (typeof v === 'bigint') {
    if (v < 0n || v > MISSING_ID) throw invalid(`${what} must fit in 64 bits unsigned`)
    return v
  }
  if (typeof v === 'number') {
    if (!Number.isSafeInteger(v) || v < 0) {
      throw invalid(`${what} must be a non-negative safe integer or a BigInt, got ${v}`)
    }
    return BigInt(v)
  }
  throw new TypeError(`${what} must be a BigInt or a number, not ${typeof v}`)
}

/** Ids as a BigUint64Array: one id, an array of BigInts or numbers, or the array itself. */
function ids(x, what = 'ids') {
  if (x instanceof BigUint64Array) return x
  if (x instanceof BigInt64Array) {
    for (const v of x) if (v < 0n) throw invalid(`${what} must be non-negative`)
    return new BigUint64Array(x.buffer, x.byteOffset, x.length)
  }
  const list = Array.isArray(x) ? x : [x]
  return BigUint64Array.from(list.map((v) => bigintId(v, what)))
}

function jsonOf(value, what) {
  return JSON.stringify(value, (key, v) => {
    if (typeof v === 'number' && !Number.isFinite(v)) {
      throw invalid(`${what}: ${v} is not allowed (NaN and infinities)`)
    }
    if (typeof v === 'bigint') {
      if (v >= BigInt(Number.MIN_SAFE_INTEGER) && v <= BigInt(Number.MAX_SAFE_INTEGER)) {
        return Number(v)
      }
      throw invalid(`${what}: the BigInt ${v} does not fit an integer value (64-bit signed, safe in JSON)`)
    }
    return v
  })
}

/** One JSON document per row (null or undefined: none). */
function docs(metadata, rows) {
  if (metadata === undefined || metadata === null) return undefined
  const list = Array.isArray(metadata) ? metadata : [metadata]
  if (list.length !== rows) throw invalid(`${list.length} metadata objects for ${rows} vectors`)
  return list.map((m) => {
    if (m === null || m === undefined) return '{}'
    if (typeof m !== 'object' || Array.isArray(m)) throw new TypeError('metadata must be plain objects')
    return jsonOf(m, 'metadata')
  })
}

/** Filters: none, one object for every row, or one per row (null: none for that row). */
function filters(filter, rows) {
  if (filter === undefined || filter === null) return undefined
  if (!Array.isArray(filter)) return [jsonOf(filter, 'filter')]
  if (filter.length !== rows) {
    throw invalid(`${filter.length} filters for ${rows} queries: give one object for all, or one per query`)
  }
  return filter.map((f) => (f === null || f === undefined ? null : jsonOf(f, 'filter')))
}

function texts(t, rows) {
  const list = typeof t === 'string' ? [t] : Array.from(t)
  for (const s of list) if (typeof s !== 'string') throw new TypeError('query texts must be strings')
  if (rows >= 0 && list.length !== rows) {
    throw invalid(`${list.length} texts for ${rows} query vectors: give one text per vector`)
  }
  return list
}

function kEf(k = 10, ef = undefined) {
  if (!Number.isInteger(k) || k < 1) throw invalid('k must be an integer of at least 1')
  const e = ef === undefined || ef === null ? Math.max(64, k) : ef
  if (!Number.isInteger(e) || e < 1) throw invalid('ef must be an integer of at least 1')
  const huge = 2 ** 31
  return [Math.min(k, huge), Math.min(e, huge)]
}

function threadsOf(threads, rows) {
  if (threads === undefined) return rows <= 1 ? 1 : 0
  if (!Number.isInteger(threads) || threads < 0) throw invalid('threads must be an integer of at least 0')
  return rows <= 1 ? 1 : threads
}

function fieldsOf(fields) {
  if (fields === undefined || fields === null) return []
  const list = Array.isArray(fields) ? fields : [fields]
  return list.map((f) => {
    if (typeof f === 'string') return { name: f }
    if (typeof f === 'object' && f !== null && typeof f.name === 'string') {
      const unknown = Object.keys(f).filter((k) => !['name', 'stem', 'stopWords', 'lowercase'].includes(k))
      if (unknown.length) {
        throw invalid(`a text field takes name, stem, stopWords and lowercase; not ${unknown.join(', ')}`)
      }
      return { name: f.name, stem: f.stem, stopWords: f.stopWords, lowercase: f.lowercase }
    }
    throw new TypeError('a text field is a name or { name, stem?, stopWords?, lowercase? }')
  })
}

function createOptions(o) {
  if (!o || !Number.isInteger(o.dims) || o.dims < 1) throw invalid('dims must be an integer of at least 1')
  return {
    dims: o.dims,
    metric: o.metric ?? 'cosine',
    M: o.M ?? 16,
    efConstruction: o.efConstruction ?? 200,
    format: o.format ?? 0,
    codes: o.codes ?? 'none',
    precision: o.precision ?? 'f32',
    textFields: fieldsOf(o.textFields),
  }
}

function rowsOf(array, dims) {
  const out = []
  for (let i = 0; i < array.length; i += dims) out.push(array.subarray(i, i + dims))
  return out
}

const disposeSym = Symbol.dispose ?? Symbol.for('nodejs.dispose')
const asyncDisposeSym = Symbol.asyncDispose ?? Symbol.for('nodejs.asyncDispose')

/**
 * An HNSW index in one Chassis file. Open it with `Index.create` or `Index.open`.
 *
 * One writer at a time holds the file's lock (a second gets LockedError); readers
 * (`{ readOnly: true }`) take no lock and see every flush. Changes are visible to the writer's
 * own searches at once and durable at `flush()`; `close()` without a flush discards them.
 */
class Index {
  constructor(raw) {
    if (!(raw instanceof native.RawIndex)) {
      throw new TypeError('use Index.create(...) or Index.open(...)')
    }
    this._raw = raw
  }

  static createSync(file, options) {
    return new Index(call(() => native.RawIndex.create(String(file), createOptions(options))))
  }
  static async create(file, options) {
    return callAsync(() => native.createIndex(String(file), createOptions(options)).then((r) => new Index(r)))
  }
  static openSync(file, { readOnly = false } = {}) {
    return new Index(call(() => native.RawIndex.open(String(file), Boolean(readOnly))))
  }
  static async open(file, { readOnly = false } = {}) {
    return callAsync(() => native.openIndex(String(file), Boolean(readOnly)).then((r) => new Index(r)))
  }
  /** Converts an hnswlib 0.7/0.8 file into a new Chassis file at `dst` (labels become ids). */
  static async migrateHnswlib(src, dst, metric) {
    return callAsync(() =>
      native.migrateHnswlib(String(src), String(dst), String(metric)).then((r) => new Index(r)),
    )
  }

  get path() {
    return this._raw.path
  }
  get dims() {
    return call(() => this._raw.dims)
  }
  get metric() {
    return call(() => this._raw.metric)
  }
  get readOnly() {
    return call(() => this._raw.readOnly)
  }
  get closed() {
    return this._raw.closed
  }
  /** Live vectors. */
  get size() {
    return call(() => this._raw.size())
  }
  has(id) {
    return call(() => this._raw.has(bigintId(id, 'id')))
  }

  /**
   * Adds vectors (a Float32Array of rows × dims is used in place: don't change it until the
   * Promise settles). `ids`: BigInts or numbers (default: assigned, one above every stored
   * id); `metadata`: one plain object per row; `threads`: link on that many threads (0:
   * every core, 1: the same graph on every run). All or nothing. Resolves to the ids.
   */
  async add(vectors, { ids: given, metadata, threads = 0 } = {}) {
    return callAsync(() => {
      const { data, rows } = matrix(vectors, this.dims, 'vectors')
      const idArr = given === undefined || given === null ? undefined : ids(given)
      if (idArr && idArr.length !== rows) throw invalid(`${idArr.length} ids for ${rows} vectors`)
      return this._raw.add(data, rows, idArr, docs(metadata, rows), threads)
    })
  }
  /** Stores each row under its id: added where the id is not live, replaced where it is. */
  async upsert(vectors, { ids: given, metadata } = {}) {
    return callAsync(() => {
      const { data, rows } = matrix(vectors, this.dims, 'vectors')
      const idArr = ids(given)
      if (idArr.length !== rows) throw invalid(`${idArr.length} ids for ${rows} vectors`)
      return this._raw.upsert(data, rows, idArr, docs(metadata, rows))
    })
  }
  /** Replaces the metadata of live ids (their vectors stay). */
  async setMetadata(given, metadata) {
    return callAsync(() => {
      const idArr = ids(given)
      return this._raw.setMetadata(idArr, docs(metadata, idArr.length))
    })
  }
  /** The metadata of one id (an object) or of several (an array). */
  getMetadata(given) {
    const one = !Array.isArray(given) && !ArrayBuffer.isView(given)
    const out = call(() => this._raw.getMetadata(ids(given)).map((t) => JSON.parse(t)))
    return one ? out[0] : out
  }
  /** The stored vector of one id (a Float32Array) or of several (an array of them). */
  get(given) {
    const one = !Array.isArray(given) && !ArrayBuffer.isView(given)
    const flat = call(() => this._raw.get(ids(given)))
    return one ? flat : rowsOf(flat, this.dims)
  }
  /** Deletes every id, or none if one is not live. */
  async delete(given) {
    return callAsync(() => this._raw.delete(ids(given)))
  }

  /**
   * The k nearest live vectors of each query, nearest first: `{ ids, distances }`, flat
   * rows × k (padded with MISSING_ID and Infinity), with `rows` and `k`. `filter`: one
   * object for every query or one per query. With `text` (one per query), a hybrid search:
   * `{ ids, scores }` (fused, higher is better) and, with `returnLegs`, each leg's ranks and
   * scores.
   */
  async search(queries, options = {}) {
    return callAsync(() => {
      const { k: k0, ef: ef0, filter, threads, text } = options
      const { data, rows } = matrix(queries, this.dims, 'queries')
      const [k, ef] = kEf(k0, ef0)
      const f = filters(filter, rows)
      const t = threadsOf(threads, rows)
      if (text !== undefined && text !== null) {
        return this._raw
          .searchHybrid(data, rows, texts(text, rows), k, ef, t, f, hybridArgs(options))
          .then((r) => hybridResult(r, rows, options.returnLegs))
      }
      return this._raw.search(data, rows, k, ef, t, f).then((r) => withShape(r, rows))
    })
  }
  /** `search` (vectors only) on the calling thread. */
  searchSync(queries, { k: k0, ef: ef0, filter } = {}) {
    return call(() => {
      const { data, rows } = matrix(queries, this.dims, 'queries')
      const [k, ef] = kEf(k0, ef0)
      return withShape(this._raw.searchSync(data, rows, k, ef, filters(filter, rows)), rows)
    })
  }
  /** BM25's k best live documents for each text: `{ ids, scores }`, rows × k. */
  async searchText(queryTexts, { k: k0, filter, threads } = {}) {
    return callAsync(() => {
      const list = texts(queryTexts, -1)
      const [k] = kEf(k0)
      return this._raw
        .searchText(list, k, threadsOf(threads, list.length), filters(filter, list.length))
        .then((r) => withShape(r, list.length))
    })
  }
  searchTextSync(queryTexts, { k: k0, filter } = {}) {
    return call(() => {
      const list = texts(queryTexts, -1)
      const [k] = kEf(k0)
      return withShape(this._raw.searchTextSync(list, k, filters(filter, list.length)), list.length)
    })
  }
  /** The fields indexed for full-text search. */
  get textFields() {
    return call(() => this._raw.textFields())
  }
  /** Indexes these metadata fields for full-text search from now on (every stored
   * document included; [] drops the index); committed by the next flush. */
  async setTextFields(fields) {
    return callAsync(() => this._raw.setTextFields(fieldsOf(fields)))
  }

  async flush() {
    return callAsync(() => this._raw.flush())
  }
  flushSync() {
    return call(() => this._raw.flushSync())
  }
  /** Discards every change since the last flush, keeping the writer's lock. */
  rollback() {
    return call(() => this._raw.rollback())
  }
  /** The application's version committed with the data (a BigInt). */
  get userVersion() {
    return call(() => BigInt(this._raw.userVersion()))
  }
  set userVersion(v) {
    call(() => this._raw.setUserVersion(bigintId(v, 'userVersion')))
  }
  /** Rewrites the index into a new file and renames it over the path. */
  async compact(options = {}) {
    return callAsync(() => this._raw.compact(options))
  }
  /** Online backup of the last flush to `dst`; resolves to a report. */
  async backup(dst) {
    return callAsync(() => this._raw.backup(String(dst)).then((s) => JSON.parse(s)))
  }
  info() {
    return call(() => JSON.parse(this._raw.info()))
  }
  /** Closes the index; unflushed changes are discarded. Idempotent. */
  close() {
    this._raw.close()
  }
  /** `using ix = ...`: closes at the end of the block (unflushed changes are discarded:
   * flush inside the block). */
  [disposeSym]() {
    this.close()
  }
  async [asyncDisposeSym]() {
    this.close()
  }
  toString() {
    return this.closed ? `Index(${this.path}, closed)` : `Index(${this.path}, ${this.size} vectors)`
  }
}

function withShape(r, rows) {
  r.rows = rows
  r.k = rows === 0 ? 0 : r.ids.length / rows
  return r
}

function hybridArgs(o) {
  const [vw, tw] = o.weights ?? [1, 1]
  return {
    fusion: o.fusion ?? 'rrf',
    rrfK: o.rrfK ?? 60,
    vectorWeight: vw,
    textWeight: tw,
    depth: o.depth ?? 0,
  }
}

function hybridResult(r, rows, legs) {
  const out = { ids: r.ids, scores: r.scores }
  if (legs) {
    out.legs = {
      vectorRanks: r.vectorRanks,
      vectorDistances: r.vectorDistances,
      textRanks: r.textRanks,
      textScores: r.textScores,
    }
  }
  return withShape(out, rows)
}

/** Several shard files searched as one (see the Python package's Collection). */
class Collection {
  constructor(raw) {
    if (!(raw instanceof native.RawCollection)) {
      throw new TypeError('use Collection.create(...) or Collection.open(...)')
    }
    this._raw = raw
  }
  static async create(dir, options) {
    const shards = options?.shards ?? 4
    return new Collection(call(() => native.RawCollection.create(String(dir), createOptions(options), shards)))
  }
  static async open(dir, { readOnly = false } = {}) {
    return new Collection(call(() => native.RawCollection.open(String(dir), Boolean(readOnly))))
  }
  get dims() {
    return call(() => this._raw.dims)
  }
  get size() {
    return call(() => this._raw.size())
  }
  has(id) {
    return call(() => this._raw.has(bigintId(id, 'id')))
  }
  async add(vectors, { ids: given, metadata } = {}) {
    return callAsync(() => {
      const { data, rows } = matrix(vectors, this.dims, 'vectors')
      const idArr = given === undefined || given === null ? undefined : ids(given)
      return this._raw.add(data, idArr, docs(metadata, rows))
    })
  }
  async upsert(vectors, { ids: given, metadata } = {}) {
    return callAsync(() => {
      const { data, rows } = matrix(vectors, this.dims, 'vectors')
      return this._raw.upsert(data, ids(given), docs(metadata, rows))
    })
  }
  async setMetadata(given, metadata) {
    return callAsync(() => {
      const idArr = ids(given)
      return this._raw.setMetadata(idArr, docs(metadata, idArr.length))
    })
  }
  getMetadata(given) {
    const one = !Array.isArray(given) && !ArrayBuffer.isView(given)
    const out = call(() => this._raw.getMetadata(ids(given)).map((t) => JSON.parse(t)))
    return one ? out[0] : out
  }
  get(given) {
    const one = !Array.isArray(given) && !ArrayBuffer.isView(given)
    const flat = call(() => this._raw.get(ids(given)))
    return one ? flat : rowsOf(flat, this.dims)
  }
  async delete(given) {
    return callAsync(() => this._raw.delete(ids(given)))
  }
  async search(queries, { k: k0, ef: ef0, filter, threads = 0 } = {}) {
    return callAsync(() => {
      const { data, rows } = matrix(queries, this.dims, 'queries')
      const [k, ef] = kEf(k0, ef0)
      if (Array.isArray(filter)) throw invalid('a collection takes one filter for every query')
      const f = filter === undefined || filter === null ? undefined : jsonOf(filter, 'filter')
      return this._raw.search(data, rows, k, ef, threads, f).then((r) => withShape(r, rows))
    })
  }
  async flush() {
    return callAsync(() => this._raw.flush())
  }
  refresh() {
    return call(() => this._raw.refresh())
  }
  info() {
    return call(() => JSON.parse(this._raw.info()))
  }
  close() {
    call(() => this._raw.close())
  }
  [disposeSym]() {
    this.close()
  }
  async [asyncDisposeSym]() {
    this.close()
  }
}

/** The Chassis id (a BigInt) a string id is stored under (as the Python LangChain store). */
function chassisId(id) {
  return native.chassisId(String(id))
}

/** The shard of each id among `shards` (as a Collection routes them). */
function shardOf(given, shards) {
  return call(() => native.shardOf(ids(given), shards))
}

module.exports = {
  Index,
  Collection,
  chassisId,
  shardOf,
  MISSING_ID,
  MAX_PADDED_K,
  CODE_KINDS,
  ChassisError,
  CorruptError,
  NotChassisFileError,
  TooNewError,
  LockedError,
  PoisonedError,
  ReadOnlyError,
  DimensionMismatchError,
  InvalidVectorError,
  DuplicateIdError,
  NotFoundError,
  InvalidArgumentError,
  IdsExhaustedError,
  FullError,
  StorageError,
}
