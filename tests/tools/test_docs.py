from switchyard.libs.tools import FileDoc, ToolCall, ToolContext, ToolRunner, ToolSettings
from switchyard.libs.tools.docs import DocsTool, load_policies
from switchyard.libs.tools.search import BM25, chunk_text, rrf, tokenize

CTX = ToolContext(tenant="default", user="dev", rid="r1")
KEYWORDS_ONLY = ToolSettings(docs_use_embeddings=False)


def test_policies_are_split_into_cited_sections():
    passages = load_policies(KEYWORDS_ONLY.policies_dir)
    sources = {p.source for p in passages}
    assert "policies/returns.md#restocking-fee" in sources
    assert "policies/damaged-items.md#reporting-damage" in sources
    assert len(passages) >= 20


def test_bm25_and_fusion_basics():
    docs = [tokenize(t) for t in ["the cat sat", "dogs and cats", "returns policy for damaged items"]]
    scores = BM25(docs).scores(tokenize("damaged returns"))
    assert max(range(3), key=lambda i: scores[i]) == 2
    assert rrf([[2, 0], [0, 2, 1]])[0][0] in (0, 2)
    assert [i for i, _ in rrf([[1], [1, 0]])] == [1, 0]


def test_chunking_keeps_all_text():
    text = "\n\n".join(f"Paragraph {i} " + "word " * 60 for i in range(10))
    chunks = chunk_text(text, "file:x.txt", size=400, overlap=50)
    assert all(len(c.text) <= 400 for c in chunks)
    joined = " ".join(c.text for c in chunks)
    assert all(f"Paragraph {i}" in joined for i in range(10))
    assert chunks[0].source == "file:x.txt#1"


async def test_damaged_policy_is_found():
    tool = DocsTool(KEYWORDS_ONLY)
    out = await tool.run({"query": "what's your policy if it arrives damaged?"}, CTX)
    assert out.sources[0].startswith("policies/damaged-items.md")
    assert "7 days" in out.output


async def test_exact_terms_are_found():
    tool = DocsTool(KEYWORDS_ONLY)
    out = await tool.run({"query": "restocking fee"}, CTX)
    assert out.sources[0] == "policies/returns.md#restocking-fee"


async def test_uploaded_files_are_searched_with_their_source():
    lease = FileDoc("f1", "lease.txt", "Tenancy agreement.\n\nThe monthly rent is 900 EUR, due on the first.")
    ctx = ToolContext("default", "dev", "r1", files=[lease])
    tool = DocsTool(KEYWORDS_ONLY)
    out = await tool.run({"query": "how much is the monthly rent"}, ctx)
    assert out.sources[0] == "file:lease.txt#1"
    assert "900 EUR" in out.output
    only_files = await tool.run({"query": "damaged items refund", "scope": "files"}, ctx)
    assert all(s.startswith("file:") for s in only_files.sources)


async def test_named_file_is_included_even_without_matching_words():
    notes = FileDoc("f2", "notes.txt", "Meeting on Tuesday. Ship the beta by Friday.")
    out = await DocsTool(KEYWORDS_ONLY).run({"query": "summarize my notes"}, ToolContext("t", "u", "r", [notes]))
    assert "file:notes.txt#1" in out.sources


async def test_no_match_and_bad_arguments():
    runner = ToolRunner(KEYWORDS_ONLY)
    res = await runner.run(
        [
            ToolCall("c1", "docs", {"query": "zxqv"}),
            ToolCall("c2", "docs", {}),
            ToolCall("c3", "docs", {"query": "x", "scope": "?"}),
        ],
        CTX,
    )
    assert res[0].status == "ok" and "No passages" in res[0].output
    assert res[1].status == "error" and res[2].status == "error"
