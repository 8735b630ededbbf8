from django.urls import path

from clients.consumers import SubscriptionConsumer
from clients.middleware import TokenAuthMiddleware

websocket_urlpatterns = [
    path(
        "ws/v1/subscribe",
        TokenAuthMiddleware(SubscriptionConsumer.as_asgi()),
    ),
]
