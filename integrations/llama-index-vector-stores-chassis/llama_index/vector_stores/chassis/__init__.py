"""LlamaIndex's vector store over a Chassis index file (see README.md)."""

from llama_index.vector_stores.chassis.base import ChassisVectorStore, to_chassis_filter

__all__ = ["ChassisVectorStore", "to_chassis_filter"]
