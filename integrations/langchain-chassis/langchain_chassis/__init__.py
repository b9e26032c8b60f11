"""LangChain's VectorStore over a Chassis index file (see README.md)."""

from langchain_chassis.vectorstores import ChassisHybridRetriever, ChassisVectorStore, chassis_id

__all__ = ["ChassisHybridRetriever", "ChassisVectorStore", "chassis_id"]
