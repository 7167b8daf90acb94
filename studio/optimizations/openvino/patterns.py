"""NNCF's search for its fusing patterns (a convolution with its bias and activation, ...) in a model's graph,
with the same matches, faster: NNCF runs networkx's subgraph isomorphism of each of its ~100 patterns over the
whole graph, a search that tries every node for each pattern node. Here each pattern is searched only among
the nodes that could match one of its nodes (their type is in the pattern), and not at all where one of its
nodes has no such node. A match maps pattern nodes only to such nodes, and the edges between them are the
graph's, so the search finds the same matches; the checks after a match (nothing outside the pattern
reaching into it) still look at the whole graph. On the bundled model's UNet (`benchmarks.openvino_patterns`,
a 2-core AMD EPYC Zen 3): ×3.0 for a hybrid int8 build (2.00 to 0.67 CPU-s of its ~14), ×4.6 for full int8."""

from __future__ import annotations

import contextlib
import functools
import importlib
import threading
from collections.abc import Callable, Hashable, Iterator
from typing import Any

_installed = threading.Lock()
HOME = "nncf.common.graph.graph_matching"  # where NNCF's search is defined
# The NNCF modules that imported the search by name.
USERS = (
    "nncf.common.graph.graph",
    "nncf.common.insertion_point_graph",
    "nncf.quantization.algorithms.weight_compression.awq",
)


def _signature(attributes: dict, names: tuple[str, ...]) -> tuple | None:
    """The node's values of the attributes patterns test (None where one cannot be hashed)."""
    values = tuple(attributes.get(name, _signature) for name in names)
    try:
        hash(values)
    except TypeError:
        return None
    return values


def _groups(graph: Any, pattern_graph: Any, always: str) -> list[list] | None:
    """The graph's nodes grouped by their values of the attributes the patterns test and of `always` (NNCF
    compares a node's type with every pattern node's); None where a node's values cannot be grouped."""
    tested = {name for _, attributes in pattern_graph.graph.nodes(data=True) for name in attributes}
    names = tuple(sorted(tested | {always}))
    groups: dict[Hashable, list] = {}
    for node, attributes in graph.nodes(data=True):
        key = _signature(attributes, names)
        if key is None:
            return None
        groups.setdefault(key, []).append(node)
    return list(groups.values())


def _candidates(graph: Any, groups: list[list], pattern: Any, matches: Callable[[dict, dict], bool]) -> set:
    """The nodes of `graph` that match some node of `pattern` (`matches` as NNCF's, asked once per group);
    none where a node of the pattern matches nothing."""
    found: set = set()
    for _, wanted in pattern.nodes(data=True):
        hits = [nodes for nodes in groups if matches(graph.nodes[nodes[0]], wanted)]
        if not hits:
            return set()  # the pattern is not in the graph
        for nodes in hits:
            found.update(nodes)
    return found


def faster(module: Any) -> Callable:
    """`module.find_subgraphs_matching_pattern` (nncf.common.graph.graph_matching), searching each pattern
    among its candidate nodes only."""
    original = module.find_subgraphs_matching_pattern
    nx, ism = module.nx, module.ism
    matches = module._are_nodes_matched  # noqa: SLF001 (NNCF's own node comparison)

    @functools.wraps(original)
    def find(graph: Any, pattern_graph: Any, strict: bool = True) -> list[list[str]]:
        groups = _groups(graph, pattern_graph, module.GraphPattern.NODE_TYPE_ATTR)
        if groups is None:
            return original(graph, pattern_graph, strict)
        subgraphs: list[list[str]] = []
        matched_nodes: set = set()
        patterns = sorted(
            pattern_graph.get_weakly_connected_subgraphs(),
            key=module._sort_patterns_by_len,  # noqa: SLF001
            reverse=True,
        )
        for pattern in patterns:
            candidates = _candidates(graph, groups, pattern, matches)
            if not candidates:
                continue
            searched = graph.subgraph(candidates).copy() if len(candidates) < len(graph) else graph
            matcher = ism.MultiDiGraphMatcher(searched, pattern, node_match=matches)
            for subgraph in matcher.subgraph_isomorphisms_iter():
                if strict and not module._is_subgraph_matching_strict(graph, pattern, subgraph):  # noqa: SLF001
                    continue
                subgraph = module._copy_subgraph_excluding_non_pattern_node(subgraph, pattern_graph)  # noqa: SLF001
                if any(node in matched_nodes for node in subgraph):
                    continue
                matched_nodes.update(subgraph)
                subgraphs.append(list(nx.lexicographical_topological_sort(graph.subgraph(subgraph))))
        return subgraphs

    find.studio_candidates = True  # type: ignore[attr-defined]
    return find


def install() -> None:
    """Once per process: NNCF's pattern search, and every module that imported it by name, search among
    candidate nodes (`faster`)."""
    with _installed:
        module = importlib.import_module(HOME)
        if getattr(module.find_subgraphs_matching_pattern, "studio_candidates", False):
            return
        find = faster(module)
        module.find_subgraphs_matching_pattern = find
        for name in USERS:
            user = importlib.import_module(name)
            if getattr(user, "find_subgraphs_matching_pattern", None) is find.__wrapped__:
                user.find_subgraphs_matching_pattern = find


@contextlib.contextmanager
def watched(seen: Callable[[Any, Any, bool, list], None]) -> Iterator[Callable]:
    """While inside, each search NNCF makes is the studio's, and `seen(graph, patterns, strict, matches)` is
    told of it (to check or time the studio's search against NNCF's own, its `__wrapped__`, which this
    yields). NNCF must have been imported as the studio imports it (`models.nncf()`)."""
    installed = importlib.import_module(HOME).find_subgraphs_matching_pattern
    assert installed.studio_candidates, "models.nncf() first: the studio's search is not installed"

    def search(graph: Any, pattern_graph: Any, strict: bool = True) -> list[list[str]]:
        found = installed(graph, pattern_graph, strict)
        seen(graph, pattern_graph, strict, found)
        return found

    search.studio_candidates = True  # type: ignore[attr-defined]  # `install` leaves it in place
    modules = [importlib.import_module(name) for name in (HOME, *USERS)]
    for module in modules:
        module.find_subgraphs_matching_pattern = search
    try:
        yield installed.__wrapped__
    finally:
        for module in modules:
            module.find_subgraphs_matching_pattern = installed
