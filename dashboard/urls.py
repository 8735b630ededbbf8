from django.contrib.auth import views as auth_views
from django.urls import path

from dashboard import live
from dashboard import views as dashboard

app_name = "dashboard"
urlpatterns = [
    path("", dashboard.overview, name="overview"),
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
    path("counts.json", dashboard.counts, name="counts"),
    path("nodes.json", dashboard.node_series, name="node_series"),
    path("clients/", dashboard.clients, name="clients"),
    path("clients/<str:durable_id>/", dashboard.client_detail, name="client"),
    path(
        "clients/<str:durable_id>/state.json",
        dashboard.client_state,
        name="client_state",
    ),
    path(
        "clients/<str:durable_id>/close/", dashboard.client_close, name="client_close"
    ),
    path(
        "clients/<str:durable_id>/interests/<int:pk>/remove/",
        dashboard.interest_remove,
        name="interest_remove",
    ),
    path("regions/", dashboard.regions, name="regions"),
    path("regions/<str:name>/", dashboard.region_detail, name="region"),
    path("regions/<str:name>/live/", live.region_live, name="region_live"),
    path(
        "regions/<str:name>/entries/<str:action>/",
        dashboard.entry_action,
        name="entry_action",
    ),
    path("regions/<str:name>/clear/", dashboard.region_clear, name="region_clear"),
    path(
        "regions/<str:name>/destroy/", dashboard.region_destroy, name="region_destroy"
    ),
]
