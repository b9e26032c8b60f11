import type { DocumentInterface } from '@langchain/core/documents'
import type { EmbeddingsInterface } from '@langchain/core/embeddings'
import { VectorStore } from '@langchain/core/vectorstores'
import type { Index } from 'chassis'

export declare const TEXT_KEY: '_chassis_text'
export declare const ID_KEY: '_chassis_id'
/** The Chassis id a string id is stored under (as the Python store's `chassis_id`). */
export declare function chassisId(id: string): bigint

export interface ChassisStoreConfig {
  /** The index file (created by the first add if missing). */
  path: string
  metric?: 'cosine' | 'l2' | 'ip'
  M?: number
  efConstruction?: number
  efSearch?: number
  readOnly?: boolean
  /** Make every add and delete durable before it resolves (default true). */
  flushOnWrite?: boolean
  /** Index the texts for keyword and hybrid search at creation (default true). */
  fullText?: boolean
  ids?: string[]
}

export interface HybridSearchOptions {
  fusion?: 'rrf' | 'relative_score'
  weights?: [number, number]
  depth?: number
}

export declare class ChassisVectorStore extends VectorStore {
  FilterType: Record<string, unknown>
  index: Index | null
  constructor(embeddings: EmbeddingsInterface, config: ChassisStoreConfig)
  _vectorstoreType(): string
  addVectors(vectors: number[][], documents: DocumentInterface[], options?: { ids?: string[] }): Promise<string[]>
  addDocuments(documents: DocumentInterface[], options?: { ids?: string[] }): Promise<string[]>
  delete(params: { ids: string[] }): Promise<void>
  flush(): Promise<void>
  close(): void
  getByIds(ids: string[]): Promise<DocumentInterface[]>
  similaritySearchVectorWithScore(query: number[], k: number, filter?: Record<string, unknown>): Promise<[DocumentInterface, number][]>
  enableFullText(): Promise<void>
  keywordSearchWithScore(query: string, k?: number, filter?: Record<string, unknown>): Promise<[DocumentInterface, number][]>
  keywordSearch(query: string, k?: number, filter?: Record<string, unknown>): Promise<DocumentInterface[]>
  hybridSearchWithScore(query: string, k?: number, filter?: Record<string, unknown>, options?: HybridSearchOptions): Promise<[DocumentInterface, number][]>
  hybridSearch(query: string, k?: number, filter?: Record<string, unknown>, options?: HybridSearchOptions): Promise<DocumentInterface[]>
  static fromTexts(texts: string[], metadatas: object[] | object, embeddings: EmbeddingsInterface, config: ChassisStoreConfig): Promise<ChassisVectorStore>
  static fromDocuments(docs: DocumentInterface[], embeddings: EmbeddingsInterface, config: ChassisStoreConfig): Promise<ChassisVectorStore>
}
