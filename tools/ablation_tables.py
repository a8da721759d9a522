"""The six miniature ablations as data: each paper's variants (the recipe and the few config keys
the paper changes), the downstream tasks, the paper's figures and ordering with their sources,
and the notes on where the miniature has to differ. ``tools/ablations.py`` runs them at a scale,
``tools/ablation_paper.py`` prints their commands at the papers' scale.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Variant:
    name: str  # row label and folder name
    recipe: str  # configs/<recipe>.py
    overrides: tuple  # (dotted config key, value) pairs applied to the recipe's config
    paper: str = ""  # what the paper reports for this row


@dataclasses.dataclass(frozen=True)
class Ablation:
    title: str
    variants: tuple
    tasks: tuple  # fine-tuning tasks, the first one decides the ordering check
    # Variant names best first, where the paper states an ordering; several such chains (a tuple
    # of tuples) where the table holds several comparisons.
    paper_order: tuple = ()
    note: str = ""
    paper_runs: dict = dataclasses.field(default_factory=dict)  # paper-scale train overrides
    micro_tasks: tuple = ()  # the tasks micro scale fine-tunes (CI time); empty: all of tasks


REPLACEMENTS = ("mac", "random", "partial_mask", "all_mask")
ERNIE_LEVELS = (1 / 3, 1 / 3, 1 / 3)  # P(basic, phrase, entity): configs/ernie.py's default
DIALOGUE = "dialogue"  # the --input name of the dialogue source in DLM variants
# SpanBERT Table 6's rows: segment pairs with NSP and no SBO, ERNIE's unit ids in the data.
SPANBERT_2SEQ = (
    ("data.format", "segment_pair"),
    ("model.sentence_head", "nsp"),
    ("model.span_boundary_head", False),
    ("data.fields", ("phrase_ids", "entity_ids")),
)
# SpanBERT's dev figures (Joshi et al. 2020, latest arXiv version 1907.10529, Table 6: masking
# schemes, all 2seq + NSP, checkpoints at 1.2M steps): SQuAD 2.0 F1, OntoNotes coreference F1,
# GLUE average.
SPANBERT_T6 = {
    "subword": "SQuAD 2.0 83.8, coref 77.7, GLUE 83.2 (BERT's masking)",
    "words": "SQuAD 2.0 84.3, coref 76.6, GLUE 82.9",
    "entities": "SQuAD 2.0 84.8, coref 75.6, GLUE 83.2",
    "phrases": "SQuAD 2.0 85.0, coref 76.7, GLUE 83.5",
    "spans": "SQuAD 2.0 85.4, coref 76.4, GLUE 83.4",
}
ABLATIONS = {
    "macbert_replacement": Ablation(
        title="MacBERT: the MLM replacement policy (Cui et al., 2020)",
        variants=tuple(
            Variant(
                p,
                "macbert",
                # MacBERT's selection (whole-word n-grams) everywhere; 'correction' is that
                # selection with similar-word replacement, 'ngram' the same with the others.
                (("masking.scheme", "correction" if p == "mac" else "ngram"),)
                + (("masking.replacement", p),),
                paper=f"rank {i + 1}",
            )
            for i, p in enumerate(REPLACEMENTS)
        ),
        tasks=("cmrc2018", "chnsenticorp"),
        paper_order=REPLACEMENTS,
        note=(
            "The paper plots the four policies (80% similar word / 90% random / 80% [MASK] "
            "with 10% random / 90% [MASK], 10% kept in each) on CMRC 2018 and DRCD over "
            "pretraining steps and finds mac > random > partial_mask > all_mask; the rank "
            "column is that ordering (a figure: no numbers to quote). The journal version's "
            "table of MacBERT-large ablations (arXiv 1906.08101, IEEE TASLP 2021) puts the test "
            "average at 87.18 with Mac and 86.88 without it (w/o Mac)."
        ),
        paper_runs=dict(num_steps=1_000_000, batch_size=256),
        micro_tasks=("cmrc2018",),
    ),
    "roberta_inputs": Ablation(
        title="RoBERTa Table 2: input format and NSP (Liu et al., 2019)",
        variants=(
            Variant(
                "segment_pair+nsp",
                "roberta_wwm",
                (("data.format", "segment_pair"), ("model.sentence_head", "nsp")),
                paper="SQuAD 1.1 90.4, MNLI-m 84.0, SST-2 92.9",
            ),
            Variant(
                "full_sentences",
                "roberta_wwm",
                (("data.format", "full_sentences"),),
                paper="SQuAD 1.1 90.4, MNLI-m 84.7, SST-2 92.5",
            ),
            Variant(
                "doc_sentences",
                "roberta_wwm",
                (("data.format", "doc_sentences"),),
                paper="SQuAD 1.1 90.6, MNLI-m 84.7, SST-2 92.7",
            ),
        ),
        tasks=("cmrc2018", "ocnli", "chnsenticorp"),
        note=(
            "CMRC 2018, OCNLI and ChnSentiCorp stand in for SQuAD, MNLI and SST-2. Every row "
            "uses whole-word masking (roberta_wwm); only the input format and the sentence "
            "head change."
        ),
        paper_runs=dict(num_steps=1_000_000, batch_size=256),
        micro_tasks=("chnsenticorp",),
    ),
    "albert_sharing": Ablation(
        title="ALBERT Tables 3/4: cross-layer sharing and the embedding width (Lan et al., 2020)",
        variants=(
            Variant(
                "not-shared, E=H",
                "albert",
                (("model.share_layers", "none"), ("model.embed_dim", 0)),
                paper="E=768: 108M, avg 82.3 (Table 4)",
            ),
            Variant(
                "not-shared, factorised E",
                "albert",
                (("model.share_layers", "none"),),
                paper="E=128: 89M, avg 81.7 (Table 3)",
            ),
            Variant(
                "all-shared, E=H",
                "albert",
                (("model.share_layers", "all"), ("model.embed_dim", 0)),
                paper="E=768: 31M, avg 79.8 (Table 4)",
            ),
            Variant(
                "all-shared, factorised E",
                "albert",
                (("model.share_layers", "all"),),
                paper="E=128: 12M, avg 80.1 (Table 3)",
            ),
        ),
        tasks=("cmrc2018", "ocnli", "chnsenticorp"),
        # By the paper's average over its five tasks (Tables 3 and 4, ALBERT-base).
        paper_order=(
            "not-shared, E=H",
            "not-shared, factorised E",
            "all-shared, factorised E",
            "all-shared, E=H",
        ),
        note=(
            "Factorised E is the recipe's E=128 at base size (H=768); in miniature (H=128) it "
            "is E=32. CMRC 2018, OCNLI and ChnSentiCorp stand in for SQuAD, MNLI and SST-2. "
            "The paper's ordering is by its average over five tasks (SQuAD 1.1 and 2.0, MNLI, "
            "SST-2, RACE)."
        ),
        paper_runs=dict(num_steps=125_000, batch_size=4096),
        micro_tasks=("chnsenticorp",),
    ),
    "ernie_knowledge": Ablation(
        title="ERNIE 1.0: knowledge masking and the DLM (Sun et al., 2019)",
        variants=(
            Variant(
                "basic",
                "ernie",
                (("masking.scheme", "token"),),
                paper="XNLI, 10% of the data: basic-level (characters); figure not verified",
            ),
            Variant(
                "+phrase",
                "ernie",
                (("masking.scheme", "knowledge"), ("masking.knowledge_probs", (0.5, 0.5, 0.0))),
                paper="basic + phrase-level: above basic; figure not verified",
            ),
            Variant(
                "+entity",
                "ernie",
                (("masking.scheme", "knowledge"), ("masking.knowledge_probs", ERNIE_LEVELS)),
                paper="basic + phrase + entity: the best of the three; figure not verified",
            ),
            Variant(
                "+entity +DLM",
                "ernie",
                (
                    ("masking.scheme", "knowledge"),
                    ("masking.knowledge_probs", ERNIE_LEVELS),
                    ("data.dialogue_sources", (DIALOGUE,)),
                    ("data.mixture", f"text:84.3,{DIALOGUE}:15.7"),
                ),
                paper="+ forum dialogue (15.7%) with DLM: XNLI +0.7 dev / +1.0 test accuracy "
                "(the paper's prose as two secondary notes quote it; its table not verified)",
            ),
        ),
        tasks=("ocnli", "msra_ner"),
        paper_order=(("+entity", "+phrase", "basic"), ("+entity +DLM", "+entity")),
        note=(
            "OCNLI and MSRA NER stand in for XNLI (the paper's ablations are on XNLI only, dev and "
            "test accuracy). The paper adds its levels as training stages (basic, then phrase, "
            "then entity); here every sequence draws its level (masking.knowledge_probs: basic, "
            "phrase, entity) and a level's phrases or entities are masked before its plain words; "
            "'basic' is character masking (scheme token), '+phrase' draws basic or phrase, "
            "'+entity' all three (the recipe). '+entity +DLM' is configs/ernie.py:dlm's data at "
            "this scale: the bundled dialogue sample mixed in at 15.7% as DLM instances (role "
            "ids in the token types, real/fake in the NSP head), as the paper's DLM table mixes "
            "forum dialogue into encyclopedia and news text; every other row reads the text only. "
            "Phrases and entities are THUOCL lexicon matches, not the paper's tools. The paper's "
            "figures (arXiv 1904.09223, its XNLI tables) are not verified here: no stored copy "
            "of its full text could be read, and the notes that discuss it show the tables as "
            "images. The rows give the comparison and the ordering it reports; the DLM row's "
            "gain is the paper's sentence as quoted in secondary notes, which also give its DLM "
            "corpora as 10% samples of Baike 71.2%, news 13% and forum dialogue 15.7%, each "
            "figure the mean of 5 fine-tuning runs."
        ),
        # ERNIE 1.0 gives no step count that could be checked here: BERT's schedule.
        paper_runs=dict(num_steps=1_000_000, batch_size=256),
        micro_tasks=("ocnli",),
    ),
    "spanbert_masking": Ablation(
        title="SpanBERT Tables 6 and 7: masking schemes and auxiliary objectives "
        "(Joshi et al., 2020)",
        variants=(
            *(
                Variant(name, "spanbert", SPANBERT_2SEQ + overrides, paper=f"Table 6: {paper}")
                for name, overrides, paper in (
                    ("subword tokens", (("masking.scheme", "token"),), SPANBERT_T6["subword"]),
                    ("whole words", (("masking.scheme", "whole_word"),), SPANBERT_T6["words"]),
                    (
                        "named entities",
                        (("masking.scheme", "knowledge"), ("masking.knowledge_probs", (0, 0, 1))),
                        SPANBERT_T6["entities"],
                    ),
                    (
                        "noun phrases",
                        (("masking.scheme", "knowledge"), ("masking.knowledge_probs", (0, 1, 0))),
                        SPANBERT_T6["phrases"],
                    ),
                    (
                        "geometric spans",
                        (("masking.scheme", "span"),),
                        SPANBERT_T6["spans"] + "; = Table 7's span (2seq) + NSP",
                    ),
                )
            ),
            Variant(
                "span, no auxiliary",
                "spanbert",
                (("model.span_boundary_head", False),),
                paper="Table 7, span (1seq): SQuAD 2.0 86.7, coref 76.3, GLUE 83.8",
            ),
            Variant(
                "span + SBO",
                "spanbert",
                (),
                paper="Table 7, span (1seq) + SBO: SQuAD 2.0 86.8, coref 79.0, GLUE 84.0",
            ),
        ),
        tasks=("cmrc2018", "msra_ner"),
        paper_order=(
            ("geometric spans", "noun phrases", "named entities", "whole words", "subword tokens"),
            ("span + SBO", "span, no auxiliary", "geometric spans"),
        ),
        note=(
            "CMRC 2018 stands in for SQuAD 2.0 and the paper's other QA sets, MSRA NER for its "
            "span tasks (coreference, TACRED). The five masking rows are bi-sequence training with "
            "NSP and no SBO (data.format segment_pair, model.sentence_head nsp, "
            "model.span_boundary_head False), so 'geometric spans' is also Table 7's span (2seq) + "
            "NSP row; they read one dataset carrying ERNIE's phrase and entity ids (data.fields). "
            "Named entities and noun phrases are the knowledge scheme at its entity or phrase "
            "level alone (THUOCL entities and multi-word phrases, not the paper's spaCy entities "
            "and noun phrases): those units first, whole words fill the rest of the 15% (the "
            "paper: half the budget from entities or phrases, half random whole words). The two "
            "other rows "
            "are single segments (doc_sentences) without NSP, with and without the span boundary "
            "objective. The paper's orderings are on SQuAD 2.0: Table 6's masking schemes (its "
            "caption: all bi-sequence with NSP) and Table 7's objectives (SBO > no NSP > NSP). "
            "Figures: dev sets, the 1.2M-step checkpoints, from the latest arXiv version "
            "(1907.10529), where these are Tables 6 and 7."
        ),
        # Its ablations compare the 1.2M-step checkpoints of 2.4M-step runs (Sec. 4.2, Table 6).
        paper_runs=dict(num_steps=1_200_000, batch_size=256),
        micro_tasks=("msra_ner",),
    ),
    "bert_wwm": Ablation(
        title="Chinese-BERT-wwm and MacBERT: character, whole-word and n-gram masking "
        "(Cui et al., 2019/2021; 2020)",
        variants=(
            Variant(
                "character",
                "bert",
                (("masking.scheme", "token"),),
                paper="BERT: CMRC dev F1 84.5 (84.0), ChnSentiCorp dev 94.7 (94.3), "
                "MSRA NER 95.3 (94.9)",
            ),
            Variant(
                "whole word",
                "bert",
                (("masking.scheme", "whole_word"),),
                paper="BERT-wwm: CMRC dev F1 85.6 (84.7), ChnSentiCorp dev 95.1 (94.5), "
                "MSRA NER 95.4 (95.1)",
            ),
            Variant(
                "n-gram",
                "bert",
                (("masking.scheme", "ngram"),),
                paper="MacBERT-large without n-gram masking (w/o NM): CMRC test F1 89.8 "
                "against 90.7 with it; average 86.89 against 87.18",
            ),
        ),
        tasks=("cmrc2018", "chnsenticorp", "msra_ner"),
        paper_order=("n-gram", "whole word", "character"),
        note=(
            "BERT's recipe (segment pairs with NSP, 80/10/10) with only the selection changed: "
            "characters, jieba words (the paper segments with LTP), or MacBERT's n-grams of 1-4 "
            "whole words (40/30/20/10%). Paper figures: max (mean) of 10 runs, BERT and BERT-wwm "
            "base from github.com/ymcui/Chinese-BERT-wwm's README (its CMRC 2018, ChnSentiCorp and "
            "NER tables; BERT-wwm continues Google's BERT for 200k steps). The n-gram row stands "
            "for MacBERT's ablation of MacBERT-large (test scores; the table 'Ablations of "
            "MacBERT-large' in the journal version of arXiv 1906.08101, IEEE TASLP 2021; the "
            "Findings of EMNLP 2020 text could not be read here), where removing n-gram masking "
            "(w/o NM) costs accuracy; MacBERT keeps whole words and adds its correction."
        ),
        paper_runs=dict(num_steps=100_000, batch_size=2560),
        micro_tasks=("chnsenticorp",),
    ),
}


# ALBERT Tables 3 and 4 (ALBERT-base, 30k vocabulary): (sharing, E) -> published parameters.
ALBERT_PARAMS = {
    ("none", 64): 87e6,
    ("none", 128): 89e6,
    ("none", 256): 93e6,
    ("none", 768): 108e6,
    ("all", 64): 10e6,
    ("all", 128): 12e6,
    ("all", 256): 16e6,
    ("all", 768): 31e6,
    ("attention", 128): 64e6,
    ("attention", 768): 83e6,
    ("ffn", 128): 38e6,
    ("ffn", 768): 57e6,
}
