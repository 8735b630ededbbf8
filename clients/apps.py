from django.apps import AppConfig


class ClientsConfig(AppConfig):
    name = "clients"
    verbose_name = "Durable clients and interests"

    def ready(self) -> None:
        from cache import hooks
        from clients import fanout

        hooks.on_events_committed(fanout.ring_fanout)
