// ChassisVectorStore: LangChain.js's VectorStore over one Chassis index file, the twin of the
// Python `langchain-chassis` store: a file written by one opens in the other.
//
// What it keeps where:
// - Each document is one vector in the file, under a Chassis id (a u64) derived from its
//   LangChain id (a string) by `chassisId` (the first 8 bytes of its 8-byte BLAKE2b digest,
//   little-endian: Python's `chassis_id`). Its text and string id travel in its metadata under
//   the reserved keys `_chassis_text` and `_chassis_id`, beside the document's own keys, so
//   filters (Chassis's filter language) name the document's keys directly.
// - Adding a document under an id that is stored replaces it. Two different string ids on one
//   Chassis id are refused (the stored string id is compared on every add), never merged.
// - Every add and delete is flushed (durable) before it resolves, unless the store was made
//   with `flushOnWrite: false` (then call `flush()`).
// - The texts are indexed for full-text search in the same file (`fullText: true`, the
//   default, at creation): `keywordSearch` ranks by BM25, `hybridSearch` fuses BM25 with the
//   vector search (reciprocal rank fusion by default).
//
// The file is created by the first add (its dimensions come from the first embedding).
import fs from 'node:fs'
import { randomUUID } from 'node:crypto'

import { Document } from '@langchain/core/documents'
import { maximalMarginalRelevance } from '@langchain/core/utils/math'
import { VectorStore } from '@langchain/core/vectorstores'
import { Index, MISSING_ID, ReadOnlyError, chassisId } from 'chassis'

export const TEXT_KEY = '_chassis_text'
export const ID_KEY = '_chassis_id'
const RESERVED = [TEXT_KEY, ID_KEY]

export { chassisId }

export class ChassisVectorStore extends VectorStore {
  /**
   * @param {import('@langchain/core/embeddings').EmbeddingsInterface} embeddings
   * @param {object} config `path` (the index file), `metric` ('cosine', 'l2' or 'ip', at
   *   creation), `M`, `efConstruction`, `efSearch`, `readOnly`, `flushOnWrite` (default
   *   true), `fullText` (index the texts at creation; default true).
   */
  constructor(embeddings, config) {
    super(embeddings, config)
    if (!config || !config.path) throw new Error('ChassisVectorStore needs { path } (the index file)')
    const metric = config.metric ?? 'cosine'
    if (!['cosine', 'l2', 'ip'].includes(metric)) throw new Error(`metric must be "cosine", "l2" or "ip", got ${metric}`)
    this.path = String(config.path)
    this.metric = metric
    this.M = config.M ?? 16
    this.efConstruction = config.efConstruction ?? 200
    this.efSearch = config.efSearch
    this.readOnly = Boolean(config.readOnly)
    this.flushOnWrite = config.flushOnWrite ?? true
    this.fullText = config.fullText ?? true
    this.index = null
    if (fs.existsSync(this.path)) {
      this.index = Index.openSync(this.path, { readOnly: this.readOnly })
      this.metric = this.index.metric
    } else if (this.readOnly) {
      throw new Error(`no Chassis index at ${this.path}`)
    }
  }

  _vectorstoreType() {
    return 'chassis'
  }

  _writer(dims) {
    if (this.readOnly) throw new ReadOnlyError('this store was opened with readOnly: true', 'CHASSIS_READ_ONLY')
    if (!this.index && fs.existsSync(this.path)) this.index = Index.openSync(this.path)
    if (!this.index) {
      this.index = Index.createSync(this.path, {
        dims,
        metric: this.metric,
        M: this.M,
        efConstruction: this.efConstruction,
        textFields: this.fullText ? [TEXT_KEY] : undefined,
      })
    }
    return this.index
  }

  /** Stores `vectors` with `documents`; `options.ids` (else each document's `id`, else a new
   * UUID). A document under an id already stored replaces it. Resolves to the ids. */
  async addVectors(vectors, documents, options = {}) {
    if (vectors.length !== documents.length) throw new Error(`${vectors.length} vectors for ${documents.length} documents`)
    if (vectors.length === 0) return []
    const given = options.ids ?? documents.map((d) => d.id)
    const ids = documents.map((_, i) => (given[i] === undefined || given[i] === null ? randomUUID() : String(given[i])))
    const dims = vectors[0].length
    const ix = this._writer(dims)
    // One row per id: a later row with the same id replaces an earlier one.
    const last = new Map()
    ids.forEach((id, row) => last.set(id, row))
    const rows = [...last.values()].sort((a, b) => a - b)
    const keys = new Map()
    const docs = []
    for (const row of rows) {
      const id = ids[row]
      const key = chassisId(id)
      if (keys.has(key) && keys.get(key) !== id) throw new Error(`ids ${keys.get(key)} and ${id} map to one Chassis id ${key}`)
      keys.set(key, id)
      const meta = { ...(documents[row].metadata ?? {}) }
      for (const k of RESERVED) {
        if (k in meta) throw new Error(`metadata key ${k} is reserved by ChassisVectorStore`)
      }
      meta[TEXT_KEY] = documents[row].pageContent
      meta[ID_KEY] = id
      docs.push(meta)
    }
    const keyList = [...keys.keys()]
    const stored = keyList.filter((k) => ix.has(k))
    if (stored.length) {
      const metas = ix.getMetadata(stored)
      stored.forEach((k, i) => {
        if (metas[i][ID_KEY] !== keys.get(k)) {
          throw new Error(`id ${keys.get(k)} maps to Chassis id ${k}, which holds the document ${metas[i][ID_KEY]}: refusing to replace it`)
        }
      })
    }
    const flat = new Float32Array(rows.length * dims)
    rows.forEach((row, i) => flat.set(vectors[row], i * dims))
    await ix.upsert(flat, { ids: keyList, metadata: docs })
    if (this.flushOnWrite) await ix.flush()
    return ids
  }

  async addDocuments(documents, options = {}) {
    const vectors = await this.embeddings.embedDocuments(documents.map((d) => d.pageContent))
    return this.addVectors(vectors, documents, options)
  }

  /** Deletes the documents with these ids; ids not stored are ignored. */
  async delete(params = {}) {
    const ids = params.ids
    if (!ids) throw new Error('delete needs { ids } (to remove the whole store, delete its file)')
    if (!this.index) return
    const ix = this._writer(this.index.dims)
    const keys = []
    for (const id of new Set(ids.map(String))) {
      const key = chassisId(id)
      if (ix.has(key) && ix.getMetadata(key)[ID_KEY] === id) keys.push(key)
    }
    if (keys.length) {
      await ix.delete(keys)
      if (this.flushOnWrite) await ix.flush()
    }
  }

  /** Makes every add and delete durable (needed only with `flushOnWrite: false`). */
  async flush() {
    if (this.index && !this.readOnly) await this.index.flush()
  }

  /** Closes the file (the next add opens it again). */
  close() {
    if (this.index) {
      this.index.close()
      this.index = null
    }
  }

  _documents(keys) {
    if (!keys.length) return []
    return this.index.getMetadata(keys).map((meta) => {
      const { [TEXT_KEY]: text = '', [ID_KEY]: id, ...rest } = meta
      return new Document({ pageContent: text, metadata: rest, id })
    })
  }

  /** The stored documents with these ids, in the order given; missing ids are skipped. */
  async getByIds(ids) {
    if (!this.index) return []
    const keys = ids.map((id) => chassisId(String(id))).filter((k) => this.index.has(k))
    const wanted = new Set(ids.map(String))
    return this._documents(keys).filter((d) => wanted.has(d.id))
  }

  async _search(query, k, filter) {
    if (!this.index || this.index.size === 0) return [[], []]
    const ef = this.efSearch ?? Math.max(64, k)
    const res = await this.index.search(Float32Array.from(query), { k, ef: Math.max(ef, k), filter: filter ?? undefined })
    const keys = []
    const dists = []
    res.ids.forEach((id, i) => {
      if (id !== MISSING_ID) {
        keys.push(id)
        dists.push(res.distances[i])
      }
    })
    return [keys, dists]
  }

  /** The `k` nearest documents with their distances (smaller is nearer: 1 - cos for cosine,
   * squared Euclidean for l2, 1 - inner product for ip). `filter`: a Chassis filter on the
   * documents' metadata, e.g. `{ source: 'a' }` or `{ year: { $gte: 2020 } }`. */
  async similaritySearchVectorWithScore(query, k, filter) {
    const [keys, dists] = await this._search(query, k, filter)
    return this._documents(keys).map((d, i) => [d, dists[i]])
  }

  /** Maximal marginal relevance among the `fetchK` nearest. */
  async maxMarginalRelevanceSearch(query, options = {}) {
    const k = options.k ?? 4
    const fetchK = Math.max(options.fetchK ?? 20, k)
    const embedding = await this.embeddings.embedQuery(query)
    const [keys] = await this._search(embedding, fetchK, options.filter)
    if (!keys.length) return []
    const vectors = this.index.get(keys).map((v) => Array.from(v))
    const chosen = maximalMarginalRelevance(embedding, vectors, options.lambda ?? 0.5, k)
    const docs = this._documents(keys)
    return chosen.map((i) => docs[i])
  }

  _fullText() {
    if (this.index.textFields.some((f) => f.name === TEXT_KEY)) return
    throw new Error("this store's file has no full-text index: call store.enableFullText() once")
  }

  /** Indexes the stored texts for keyword and hybrid search (a file created with
   * `fullText: false`); committed at once. */
  async enableFullText() {
    if (!this.index) {
      this.fullText = true
      return
    }
    const ix = this._writer(this.index.dims)
    if (!ix.textFields.some((f) => f.name === TEXT_KEY)) {
      await ix.setTextFields([TEXT_KEY])
      await ix.flush()
    }
  }

  /** The `k` documents whose text best matches `query` by BM25, with their scores (higher is
   * better), among those passing `filter`. */
  async keywordSearchWithScore(query, k = 4, filter) {
    if (!this.index || this.index.size === 0) return []
    this._fullText()
    const res = await this.index.searchText(query, { k, filter: filter ?? undefined })
    const keys = []
    const scores = []
    res.ids.forEach((id, i) => {
      if (id !== MISSING_ID) {
        keys.push(id)
        scores.push(res.scores[i])
      }
    })
    return this._documents(keys).map((d, i) => [d, scores[i]])
  }

  async keywordSearch(query, k = 4, filter) {
    return (await this.keywordSearchWithScore(query, k, filter)).map(([d]) => d)
  }

  /** The `k` best documents by fusing the vector search for `query`'s embedding with BM25 for
   * its text, with the fused score (higher is better). `options`: `fusion` ('rrf', the
   * default, or 'relative_score'), `weights` ([vector, text]), `depth`. */
  async hybridSearchWithScore(query, k = 4, filter, options = {}) {
    if (!this.index || this.index.size === 0) return []
    this._fullText()
    const embedding = await this.embeddings.embedQuery(query)
    const ef = this.efSearch ?? Math.max(64, k)
    const res = await this.index.search(Float32Array.from(embedding), {
      k,
      ef: Math.max(ef, k),
      filter: filter ?? undefined,
      text: query,
      fusion: options.fusion,
      weights: options.weights,
      depth: options.depth,
    })
    const keys = []
    const scores = []
    res.ids.forEach((id, i) => {
      if (id !== MISSING_ID) {
        keys.push(id)
        scores.push(res.scores[i])
      }
    })
    return this._documents(keys).map((d, i) => [d, scores[i]])
  }

  async hybridSearch(query, k = 4, filter, options = {}) {
    return (await this.hybridSearchWithScore(query, k, filter, options)).map(([d]) => d)
  }

  /** A store at `config.path` holding `texts`. */
  static async fromTexts(texts, metadatas, embeddings, config) {
    const metas = Array.isArray(metadatas) ? metadatas : texts.map(() => metadatas ?? {})
    const docs = texts.map((t, i) => new Document({ pageContent: t, metadata: metas[i] ?? {} }))
    return ChassisVectorStore.fromDocuments(docs, embeddings, config)
  }

  static async fromDocuments(docs, embeddings, config) {
    const store = new ChassisVectorStore(embeddings, config)
    await store.addDocuments(docs, { ids: config?.ids })
    return store
  }
}
