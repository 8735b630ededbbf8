from django.apps import AppConfig


class DurablecacheConfig(AppConfig):
    name = "durablecache"
    verbose_name = "durablecache"
