// ES module entry: the same API as index.js (CommonJS), re-exported.
import { createRequire } from 'node:module'

const require = createRequire(import.meta.url)
const chassis = require('./index.js')

export const {
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
} = chassis
export default chassis
