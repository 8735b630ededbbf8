from django.apps import AppConfig


class CacheConfig(AppConfig):
    name = "cache"
    verbose_name = "Cache (regions, entries, events, nodes)"
