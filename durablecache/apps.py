from django.apps import AppConfig


class DurablecacheConfig(AppConfig):
    name = "durablecache"
    verbose_name = "durablecache"

    def ready(self) -> None:
        from common import trace

        trace.count_statements()  # only with DURABLECACHE_TRACE_DIR
