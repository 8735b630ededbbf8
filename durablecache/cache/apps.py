from django.apps import AppConfig


class CacheConfig(AppConfig):
    name = "durablecache.cache"
    label = "cache"
    verbose_name = "Cache (regions, entries, events, nodes)"
