"""Routes of the durable clients and nodes API, under /api/v1/
(docs/protocol.md, "REST API")."""

from django.urls import path

from clients.api import views

urlpatterns = [
    path("clients/", views.ClientListView.as_view(), name="client-list"),
    path(
        "clients/<str:durable_id>/",
        views.ClientDetailView.as_view(),
        name="client",
    ),
    path(
        "clients/<str:durable_id>/interests/",
        views.InterestListView.as_view(),
        name="client-interests",
    ),
    path(
        "clients/<str:durable_id>/interests/<int:pk>/",
        views.InterestDetailView.as_view(),
        name="client-interest",
    ),
    path(
        "clients/<str:durable_id>/queue/",
        views.QueueView.as_view(),
        name="client-queue",
    ),
    path(
        "clients/<str:durable_id>/cqs/",
        views.CqListView.as_view(),
        name="client-cqs",
    ),
    path(
        "clients/<str:durable_id>/cqs/<str:name>/",
        views.CqDetailView.as_view(),
        name="client-cq",
    ),
    path("nodes/", views.NodeListView.as_view(), name="node-list"),
]
