from django.urls import path

from sockets.consumers import SubscriptionConsumer
from sockets.middleware import TokenAuthMiddleware

websocket_urlpatterns = [
    path(
        "ws/v1/subscribe",
        TokenAuthMiddleware(SubscriptionConsumer.as_asgi()),
    ),
]
