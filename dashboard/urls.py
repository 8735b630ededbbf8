from django.contrib.auth import views as auth_views
from django.urls import path, re_path

from dashboard import live
from dashboard.views import clients, overview, regions

app_name = "dashboard"
urlpatterns = [
    path("", overview.overview, name="overview"),
    path(
        "login/",
        auth_views.LoginView.as_view(template_name="dashboard/login.html"),
        name="login",
    ),
    path(
        "logout/",
        auth_views.LogoutView.as_view(next_page="dashboard:login"),
        name="logout",
    ),
    path("counts.json", overview.counts, name="counts"),
    path("nodes.json", overview.node_series, name="node_series"),
    path("clients/", clients.clients, name="clients"),
    path("clients/<str:durable_id>/", clients.client_detail, name="client"),
    path(
        "clients/<str:durable_id>/state.json",
        clients.client_state,
        name="client_state",
    ),
    path("clients/<str:durable_id>/close/", clients.client_close, name="client_close"),
    path(
        "clients/<str:durable_id>/interests/<int:pk>/remove/",
        clients.interest_remove,
        name="interest_remove",
    ),
    # A CQ's name is 1-128 of [A-Za-z0-9._:-] (docs/protocol.md): any other
    # is held by no client, a 404 before the view.
    re_path(
        r"^clients/(?P<durable_id>[^/]+)/cqs/(?P<name>[A-Za-z0-9._:-]{1,128})/close/$",
        clients.cq_close,
        name="cq_close",
    ),
    path("regions/", regions.regions, name="regions"),
    path("regions/<str:name>/", regions.region_detail, name="region"),
    path("regions/<str:name>/live/", live.region_live, name="region_live"),
    path(
        "regions/<str:name>/entries/<str:action>/",
        regions.entry_action,
        name="entry_action",
    ),
    path("regions/<str:name>/clear/", regions.region_clear, name="region_clear"),
    path("regions/<str:name>/destroy/", regions.region_destroy, name="region_destroy"),
]
