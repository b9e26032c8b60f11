"""LangChain's standard vector store suite (langchain-tests), sync and async."""

from collections.abc import Generator

import pytest
from langchain_core.vectorstores import VectorStore
from langchain_tests.integration_tests import VectorStoreIntegrationTests

from langchain_chassis import ChassisVectorStore


class TestChassisStandard(VectorStoreIntegrationTests):
    @pytest.fixture()
    def vectorstore(self, tmp_path) -> Generator[VectorStore, None, None]:  # type: ignore[override]
        store = ChassisVectorStore(self.get_embeddings(), tmp_path / "standard.chassis")
        try:
            yield store
        finally:
            store.close()
