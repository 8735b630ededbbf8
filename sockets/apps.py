from django.apps import AppConfig


class SocketsConfig(AppConfig):
    name = "sockets"
    verbose_name = "Websocket door (subscriber sockets)"
