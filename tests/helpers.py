"""Assertions shared by the REST tests."""


def assert_error(response, status, code=None):
    """Every error under /api/ is {"error": {"code", "message"}}."""
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message"}
    assert body["error"]["message"]
    if code is not None:
        assert body["error"]["code"] == code
    return body["error"]


def follow_pages(api, url):
    """Collect every page of a list by following ``next`` links."""
    pages = []
    while url:
        response = api.get(url)
        assert response.status_code == 200, response.content
        pages.append(response.json()["results"])
        url = response.json()["next"]
    return pages
