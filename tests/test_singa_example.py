"""README.md's "The SINGA example": the CNN script of SINGA's Model documentation made a whole
program (only its imports changed, create_cpu_device() for create_cuda_gpu(), the shipped
digits for SINGA's data). The test takes the program from README.md itself and runs it as
the README says, saved as a file and run by Python in a process of its own; it must reach the
test accuracy the README claims within the epochs it claims."""

import re
import subprocess
import sys

from test_readme_walk import ROOT, section, singa_example_program

#: Lines of SINGA's Model documentation that the README's program keeps as SINGA writes them.
SINGAS_LINES = [
    "class CNN(model.Model):",
    "        self.softmax_cross_entropy = layer.SoftMaxCrossEntropy()",
    "        self.optimizer(loss)",
    "model = CNN()",
    "model.set_optimizer(sgd)",
    "tx = tensor.Tensor((batch_size, 1, IMG_SIZE, IMG_SIZE), dev, tensor.float32)",
    "ty = tensor.Tensor((batch_size, num_classes), dev, tensor.int32)",
    "model.compile([tx], is_train=True, use_graph=True, sequential=False)",
    "        tx.copy_from_numpy(x)",
    "        ty.copy_from_numpy(y)",
    "        out, loss = model(tx, ty)",
]

EPOCH = re.compile(r"^epoch (\d+): training loss ([\d.]+), test accuracy ([\d.]+)%$", re.M)


def test_the_readme_program_keeps_singas_lines():
    _, program, _ = singa_example_program()
    missing = [line for line in SINGAS_LINES if line not in program.splitlines()]
    assert not missing, f"README.md's SINGA example no longer has SINGA's lines: {missing}"
    assert "from nnmem import device, layer, model, opt, tensor" in program


def test_the_readme_program_reaches_the_accuracy_the_readme_claims(tmp_path):
    name, program, command = singa_example_program()
    prose = " ".join(section(ROOT, "README.md", "## The SINGA example").split())
    accuracy, epochs = map(int, re.findall(r"reaches (\d+)% within (\d+) epochs", prose)[0])
    (tmp_path / name).write_text(program)
    done = subprocess.run(
        [sys.executable, *command.split()[1:]],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = EPOCH.findall(done.stdout)
    assert [int(n) for n, _, _ in lines] == list(range(1, epochs + 1)), done.stdout
    losses = [float(loss) for _, loss, _ in lines]
    assert losses[-1] < losses[0] / 10, losses
    assert max(float(a) for _, _, a in lines) >= accuracy, done.stdout
