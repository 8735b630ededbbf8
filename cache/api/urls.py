"""Routes of the regions and entries API, under /api/v1/
(docs/protocol.md, "REST API")."""

from urllib.parse import quote

from django.urls import path, register_converter

from cache.api import views

# What a decoded "%2F" inside a path segment becomes before routing; keys
# never hold it (category Cc), and durablecache.asgi refuses (400) a path
# naming an entry that holds it itself (a "%1F"), so it never stands for
# anything but a slash. durablecache.asgi imports it from here,
# which is not imported here because asgi.py builds the whole application.
ENCODED_SLASH = "\x1f"


class EntryKeyConverter:
    """One path segment holding an entry key; a "/" in it comes as %2F.

    Under ASGI, EncodedSlashMiddleware turns that %2F into ENCODED_SLASH so
    the segment is not split; it is turned back into "/" here.
    """

    regex = "[^/]+"

    def to_python(self, value: str) -> str:
        return value.replace(ENCODED_SLASH, "/")

    def to_url(self, value: str) -> str:
        return quote(value, safe="")


register_converter(EntryKeyConverter, "entrykey")

urlpatterns = [
    path("regions/", views.RegionListView.as_view(), name="region-list"),
    path("regions/<str:region>/", views.RegionDetailView.as_view(), name="region"),
    path(
        "regions/<str:region>/clear/",
        views.RegionClearView.as_view(),
        name="region-clear",
    ),
    path(
        "regions/<str:region>/putall/",
        views.PutAllView.as_view(),
        name="region-putall",
    ),
    path(
        "regions/<str:region>/entries/",
        views.EntryListView.as_view(),
        name="entry-list",
    ),
    path(
        "regions/<str:region>/entries/<entrykey:key>/",
        views.EntryDetailView.as_view(),
        name="entry",
    ),
    path(
        "regions/<str:region>/entries/<entrykey:key>/invalidate/",
        views.EntryInvalidateView.as_view(),
        name="entry-invalidate",
    ),
]
