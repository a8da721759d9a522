"""The multiple-choice kind: C3's JSON and JSON lines read with their issues reported, the
sequence layout (only the passage cut), padded options masked out of the loss and the decision,
Hugging Face's ``*ForMultipleChoice`` imported and exported with the same logits, and a C3
fine-tuning run end to end with its predictions."""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import DATA, hf_folder, load_task

from zhlm import defaults
from zhlm.finetune import kinds, saved
from zhlm.finetune.kinds import multiple_choice as mc
from zhlm.finetune.readers import report as report_lib
from zhlm.finetune.readers.choices import ChoiceExample, ChoiceReader
from zhlm.finetune.saved import load_finetuned, save_finetuned
from zhlm.finetune.train import finetune
from zhlm.train import checkpoint

C3 = [
    [["男：你好。", "女：你好！"], [
        {"question": "他们在做什么?", "choice": ["打招呼", "吃饭"], "answer": "打招呼"},
    ], "d-1"],
    [["今天天气很好。"], [
        {"question": "天气怎么样?", "choice": ["好", "坏", "一般"], "answer": "好"},
        {"question": "哪天?", "choice": ["今天", "明天"], "answer": "后天"},
        {"question": "几个?", "choice": ["一", "二", "三", "四", "五"], "answer": "一"},
    ], "m-2"],
]  # fmt: skip


def _read(path, fmt, require_label=True, num_choices=0):
    task = defaults.get_finetune_config("tiny").task
    task.update(kind="multiple_choice", format=fmt, num_choices=num_choices)
    examples, report = ChoiceReader().read(path, task, require_label)
    return list(examples), report


def test_c3_json_reads_questions_with_their_passage_and_reports_bad_ones(tmp_path):
    path = tmp_path / "c3.json"
    path.write_text(json.dumps(C3, ensure_ascii=False, indent=1), encoding="utf-8")
    examples, report = _read(path, "c3")
    assert [e.guid for e in examples] == ["d-1-1", "m-2-1", "m-2-3"]
    first = examples[0]
    assert first.passage == "男：你好。\n女：你好！" and first.options == ("打招呼", "吃饭")
    assert first.label == 0 and examples[1].label == 0 and first.passage_id == "d-1"
    assert report.counts == {report_lib.UNKNOWN_ANSWER: 1}
    lines = path.read_text(encoding="utf-8").split("\n")
    where = next(i for i, text in enumerate(lines, 1) if '"question": "哪天?"' in text)
    assert report.issues[0].line == where  # the line of the question's first key

    kept, report = _read(path, "c3", num_choices=4)
    assert [e.guid for e in kept] == ["d-1-1", "m-2-1"]
    assert report.counts == {report_lib.UNKNOWN_ANSWER: 1, report_lib.TOO_MANY_OPTIONS: 1}


def test_json_lines_take_an_answer_as_text_or_index_and_none_to_predict(tmp_path):
    path = tmp_path / "mc.jsonl"
    rows = [
        {"id": "a", "question": "一加一?", "options": ["二", "三"], "answer": 0},
        {"question": "天?", "options": ["蓝", "绿"], "answer": "绿", "passage": "天是蓝的。"},
        {"question": "几?", "options": ["一", "二"], "answer": 5},
        {"question": "无?", "options": []},
    ]
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows), encoding="utf-8")
    examples, report = _read(path, "jsonl")
    assert [(e.guid, e.label) for e in examples] == [("a", 0), ("mc.jsonl:2", 1)]
    assert report.counts == {report_lib.UNKNOWN_ANSWER: 1, "missing_field": 1}
    unlabelled, _ = _read(path, "jsonl", require_label=False)
    assert len(unlabelled) == 2  # an answer that is given must still be an option


def test_only_the_passage_is_cut_and_padded_options_are_copies_marked_absent(tokenizer):
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    long = ChoiceExample("x", "长" * 40, "问题是什么", ("选项一", "二"), 1, 1, "x")
    arrays = mc.choice_features([long], tokenizer, num_choices=3, max_seq_length=20)
    ids, types, mask = (arrays[k][0] for k in ("input_ids", "token_type_ids", "attention_mask"))
    question = tokenizer.encode_batch(["问题是什么"])[0].ids
    option = tokenizer.encode_batch(["选项一"])[0].ids
    row = ids[0][: mask[0].sum()].tolist()
    assert row[0] == cls and row[-1] == sep and len(row) == 20
    passage_end = row.index(sep)
    assert row[passage_end + 1 :] == [*option, sep, *question, sep]  # whole, after the passage
    assert passage_end - 1 == 20 - 4 - len(option) - len(question)  # the passage took the cut
    assert types[0].tolist() == [0] * (passage_end + 1) + [1] * (19 - passage_end)
    np.testing.assert_array_equal(ids[2], ids[0])  # the padded third option copies the first
    assert arrays["choice_mask"].tolist() == [[1, 1, 0]] and arrays["label"].tolist() == [1]

    huge = ChoiceExample("y", "文", "问" * 30, ("选" * 30,), None, 1, "y")
    arrays = mc.choice_features([huge], tokenizer, num_choices=2, max_seq_length=20)
    row = arrays["input_ids"][0, 0].tolist()
    assert row[:2] == [cls, sep] and sum(arrays["attention_mask"][0, 0]) == 20
    assert arrays["label"].tolist() == [-1]


def test_a_padded_option_counts_in_neither_the_loss_nor_the_answer():
    kind = kinds.get("multiple_choice")
    batch = dict(choice_mask=jnp.array([[1, 1, 0]]), label=jnp.array([1]))
    loss, count = kind.loss({"logits": jnp.array([[0.0, 1.0, 50.0]])}, batch)
    two_options = -jax.nn.log_softmax(jnp.array([0.0, 1.0]))[1]
    np.testing.assert_allclose(loss, [two_options], rtol=1e-6)
    assert count.tolist() == [1.0]
    out = kind.device_outputs({"logits": jnp.array([[0.0, 1.0, 50.0]])}, batch)["logits"]
    assert int(np.argmax(out)) == 1


@pytest.mark.slow
@pytest.mark.parametrize("family", ["Bert", "Albert", "Ernie"])
def test_hf_multiple_choice_imports_and_exports_with_the_same_logits(tmp_path, family):
    import torch
    import transformers

    import zhlm

    architecture = f"{family}ForMultipleChoice"
    hf, path = hf_folder(tmp_path, architecture, family)
    config = defaults.get_finetune_config()
    config.task.update(kind="multiple_choice", num_choices=3, max_seq_length=16)
    checkpoint.adopt_model(config, checkpoint.load(path).config.model)
    kind = kinds.get("multiple_choice")
    model = kinds.task_model(config)
    fresh = saved.init_params(model, jax.random.key(1), kind.example_inputs(config.task))
    params, left_fresh = saved.merge(
        fresh, checkpoint.load(path).with_task_heads(), kind.export.head
    )
    assert left_fresh == []
    rs = np.random.RandomState(0)
    ids = rs.randint(106, 21128, (2, 3, 16)).astype(np.int32)
    types = np.zeros_like(ids)
    types[..., 9:] = 1
    mask = np.ones_like(ids)
    mask[1, 2, 11:] = 0
    ours = np.asarray(model.apply({"params": params}, ids, types, mask)["logits"])
    torch_inputs = [torch.tensor(x, dtype=torch.long) for x in (ids, mask, types)]
    with torch.no_grad():
        theirs = hf(*torch_inputs).logits.numpy()
    assert ours.shape == (2, 3)
    np.testing.assert_allclose(ours, theirs, atol=1e-4)

    best = save_finetuned(str(tmp_path / "best"), jax.device_get(params), config)
    model, params, config = load_finetuned(best)
    zhlm.to_hf(model, {"params": params}, config, str(tmp_path / "export"))
    exported = getattr(transformers, architecture).from_pretrained(str(tmp_path / "export"))
    with torch.no_grad():
        again = exported.eval()(*torch_inputs).logits.numpy()
    np.testing.assert_allclose(ours, again, atol=1e-4)


@pytest.mark.slow
def test_c3_fine_tunes_end_to_end_and_predicts_the_dev_questions(tmp_path):
    """The C3 config on its two training files (a few questions, a tiny random model): the run
    reports accuracy beside the chance rate, and ``zhlm-predict``'s records name an option."""
    from zhlm.finetune.task_model import TaskModel

    config = load_task("c3")
    config.task.max_seq_length = 64
    config.train.update(max_train_examples=48, max_eval_examples=24, batch_size=8, epochs=1)
    results = finetune(config, None, str(tmp_path / "c3"))
    assert results["metric"] == "accuracy" and results["train_examples"] == 48
    assert 25 < results["chance_rate"] < 50  # 2-4 options a question
    assert results["fresh_parameters"]
    predictor = TaskModel.load(str(tmp_path / "c3"))
    path = os.path.join(DATA, "c3", "c3-m-dev.json")
    kind = kinds.get(predictor.task.kind)
    examples, _ = kind.reader.read(path, predictor.task, require_label=False)
    examples = list(examples)
    records = predictor.predict(examples[:5])
    assert [r["id"] for r in records] == [e.guid for e in examples[:5]]
    for r, e in zip(records, examples, strict=False):
        assert r["answer"] == e.options[r["option"]] and len(r["probabilities"]) == len(e.options)
        assert abs(sum(r["probabilities"]) - 1) < 1e-5
        assert (r["passage"], r["question"], r["options"]) == (e.passage, e.question, e.options)

    import zhlm

    first = examples[0]
    by_tuple = zhlm.pipeline(str(tmp_path / "c3"))((first.passage, first.question, first.options))
    assert by_tuple["answer"] == records[0]["answer"] and "id" not in by_tuple
    np.testing.assert_allclose(by_tuple["probabilities"], records[0]["probabilities"], atol=1e-6)
    alone = zhlm.pipeline(str(tmp_path / "c3"))({"question": "哪个?", "options": ["甲", "乙"]})
    assert alone["answer"] in ("甲", "乙") and alone["passage"] == ""
