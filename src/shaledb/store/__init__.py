"""Object storage: the contract, the obstore backend, URLs and wrappers."""

from .base import PUT_ID_ATTRIBUTE, ObjectMeta, ObjectStore
from .url import open_store

__all__ = ["PUT_ID_ATTRIBUTE", "ObjectMeta", "ObjectStore", "open_store"]
