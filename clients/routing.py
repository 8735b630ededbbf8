from django.urls import path

from clients.consumers import SubscriptionConsumer

websocket_urlpatterns = [
    path("ws/v1/subscribe", SubscriptionConsumer.as_asgi()),  # type: ignore[arg-type]
]
