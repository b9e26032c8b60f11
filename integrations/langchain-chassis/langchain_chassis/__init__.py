"""LangChain's VectorStore over a Chassis index file (see README.md)."""

from langchain_chassis.vectorstores import ChassisVectorStore, chassis_id

__all__ = ["ChassisVectorStore", "chassis_id"]
