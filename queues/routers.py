"""Send the queues app to the node store and everything else to the cluster."""

from typing import Any

from django.db.models import Model

NODE_STORE = "node"
APP = "queues"


class NodeStoreRouter:
    def db_for_read(self, model: type[Model], **hints: Any) -> str | None:
        return NODE_STORE if model._meta.app_label == APP else "default"

    def db_for_write(self, model: type[Model], **hints: Any) -> str | None:
        return NODE_STORE if model._meta.app_label == APP else "default"

    def allow_relation(self, obj1: Model, obj2: Model, **hints: Any) -> bool | None:
        same = (obj1._meta.app_label == APP) == (obj2._meta.app_label == APP)
        return same

    def allow_migrate(
        self, db: str, app_label: str, model_name: str | None = None, **hints: Any
    ) -> bool:
        if app_label == APP:
            return db == NODE_STORE
        return db == "default"
