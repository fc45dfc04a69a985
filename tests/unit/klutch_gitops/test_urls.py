import pytest

from klutch_gitops.errors import KlutchError
from klutch_gitops.urls import normalize_repo_url, redact

SAME_REPOSITORY = [
    "https://github.com/org/repo",
    "https://github.com/org/repo.git",
    "https://github.com/org/repo/",
    "https://GitHub.com/org/repo.git/",
    "https://github.com:443/org/repo",
    "https://user:token@github.com/org/repo.git",
    "http://github.com/org/repo",
    "git@github.com:org/repo.git",
    "git@github.com:org/repo",
    "ssh://git@github.com/org/repo",
    "ssh://git@github.com:22/org/repo.git",
    "git://github.com/org/repo.git",
]


@pytest.mark.parametrize("url", SAME_REPOSITORY)
def test_spellings_of_one_repository_share_a_key(url: str) -> None:
    assert normalize_repo_url(url) == "github.com/org/repo"


@pytest.mark.parametrize(
    ("url", "key"),
    [
        ("file:///srv/x.git", "file:///srv/x"),
        ("file:///srv/x/", "file:///srv/x"),
        ("/srv/x.git", "file:///srv/x"),
        (
            "ssh://git@gitlab.example.com:2222/group/sub/repo.git",
            "gitlab.example.com:2222/group/sub/repo",
        ),
        ("https://gitea.example.com:8443/org/repo", "gitea.example.com:8443/org/repo"),
    ],
)
def test_keys(url: str, key: str) -> None:
    assert normalize_repo_url(url) == key


@pytest.mark.parametrize(
    "other",
    [
        "https://gitlab.com/org/repo",  # other host
        "https://github.com/org/repo2",  # other path
        "https://github.com/other/repo",
        "https://github.com/org/repo/sub",
        "https://github.com:8443/org/repo",  # other port
        "file:///github.com/org/repo",  # a local path is never a host
    ],
)
def test_other_repositories_differ(other: str) -> None:
    assert normalize_repo_url(other) != normalize_repo_url("git@github.com:org/repo.git")


def test_path_case_is_kept() -> None:
    assert normalize_repo_url("https://Host/Org/Repo") == "host/Org/Repo"


@pytest.mark.parametrize(
    "url", ["", "relative/path", "https://", "https://github.com", "ftp://host/x", "https://h:x/r"]
)
def test_invalid_urls_are_refused_without_credentials(url: str) -> None:
    with pytest.raises(ValueError, match="not a repository URL") as raised:
        normalize_repo_url(url)
    assert isinstance(raised.value, KlutchError)
    assert raised.value.fix


def test_invalid_url_error_hides_token() -> None:
    with pytest.raises(ValueError, match="not a repository URL") as raised:
        normalize_repo_url("ftp://user:s3cret@host/x")
    assert "s3cret" not in str(raised.value)


@pytest.mark.parametrize(
    ("url", "redacted"),
    [
        ("https://user:s3cret@github.com/org/repo", "https://user:***@github.com/org/repo"),
        ("https://oauth2:glpat-abc@gitlab.com/g/r.git", "https://oauth2:***@gitlab.com/g/r.git"),
        ("https://ghp_abc123@github.com/org/repo", "https://***@github.com/org/repo"),
        ("ssh://git@github.com/org/repo", "ssh://git@github.com/org/repo"),
        ("ssh://git:pw@github.com/org/repo", "ssh://git:***@github.com/org/repo"),
        ("git@github.com:org/repo.git", "git@github.com:org/repo.git"),
        ("https://github.com/org/repo", "https://github.com/org/repo"),
        ("file:///srv/x.git", "file:///srv/x.git"),
        (
            "fatal: unable to access 'https://u:tok@h/r/': 403",
            "fatal: unable to access 'https://u:***@h/r/': 403",
        ),
    ],
)
def test_redact(url: str, redacted: str) -> None:
    assert redact(url) == redacted
