"""Profiles: [default] without --profile, [NAME] with it, the command line wins, clear errors."""
import pytest


@pytest.fixture
def profile_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    (tmp_path / "slurmgen.toml").write_text(
        '[default]\npartition = "debug"\nnodes = 4\ngpus = [1, 1, 2, 2]\nenv = { HF_HOME = "/shared/hf" }\n\n'
        '[big]\npartition = "gpu"\ncpus-per-gpu = 8\nsetup = ["module load cuda"]\n')
    return tmp_path


def script(result_dir):
    return (result_dir / "generated.sh").read_text()


def test_default_profile_applies(render_args, profile_dir):
    assert render_args("render").exit_code == 0
    text = script(profile_dir)
    assert "#SBATCH --partition=debug" in text and "world size 6" in text
    assert "export HF_HOME=/shared/hf" in text


def test_named_profile_and_command_line_wins(render_args, profile_dir):
    result = render_args("render", "--profile", "big", "--cpus-per-gpu", "2")
    assert result.exit_code == 0, result.output
    text = script(profile_dir)
    assert "#SBATCH --partition=gpu" in text
    assert "#SBATCH --cpus-per-task=2" in text
    assert "module load cuda" in text


def test_show_config_names_sources(render_args, profile_dir):
    result = render_args("render", "--show-config", "--time", "30")
    lines = {line.lstrip("# ").split("=")[0].strip(): line for line in result.stdout.splitlines()}
    assert f"# profile [default] in {profile_dir / 'slurmgen.toml'}" in lines["partition"]
    assert "# command line" in lines["time"]
    assert "# default" in lines["job-name"]
    assert not (profile_dir / "generated.sh").exists()


def test_user_config_directory_is_the_fallback(render_args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config" / "slurmgen").mkdir(parents=True)
    (tmp_path / "config" / "slurmgen" / "slurmgen.toml").write_text('[default]\nqos = "low"\n')
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    assert render_args("render").exit_code == 0
    assert "#SBATCH --qos=low" in (tmp_path / "generated.sh").read_text()


@pytest.mark.parametrize("content,message", [
    ('[default]\npartition = "debug\n', "slurmgen.toml: Illegal character '\\n' (at line 2, column 19)"),
    ('[default]\nnodes = 2\nbogus = 1\n', "slurmgen.toml: line 3: unknown option 'bogus' in [default]; valid: "),
])
def test_malformed_profile_names_file_and_line(render_args, profile_dir, content, message):
    (profile_dir / "slurmgen.toml").write_text(content)
    result = render_args("render")
    assert result.exit_code == 2
    assert result.stderr.startswith(f"slurmgen: error: {profile_dir}/{message}")
    assert len(result.stderr.splitlines()) == 1


def test_unknown_profile(render_args, profile_dir):
    result = render_args("render", "--profile", "tiny")
    assert result.exit_code == 2
    assert result.stderr == (f"slurmgen: error: --profile 'tiny': {profile_dir / 'slurmgen.toml'}"
                             " has no [tiny] table; it has big, default\n")


def test_a_profile_carries_the_options_of_real_training_scripts(render_args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    (tmp_path / "slurmgen.toml").write_text(
        '[big]\nnodes = 2\ngpus = 8\nexclusive = true\nmem-per-gpu = "80G"\nhint = "nomultithread"\n'
        'reservation = "hero"\nmail-type = "FAIL"\nerror-log = true\nlog-name = "%x-%j.log"\n'
        'sbatch = ["overcommit", "comment=big run"]\nsrun-arg = ["--cpu-bind=cores"]\n'
        'launcher-arg = ["--tee=3"]\nmaster-addr-ip = true\n')
    result = render_args("render", "--profile", "big")
    assert result.exit_code == 0, result.output
    text = script(tmp_path)
    for line in ("#SBATCH --exclusive", "#SBATCH --mem=640G", "#SBATCH --hint=nomultithread",
                 "#SBATCH --reservation=hero", "#SBATCH --mail-type=FAIL", "#SBATCH --overcommit",
                 '#SBATCH --comment="big run"', f"#SBATCH --output={tmp_path}/logs/%x-%j.log",
                 f"#SBATCH --error={tmp_path}/logs/%x-%j.log.err"):
        assert line in text.splitlines()
    assert "--kill-on-bad-exit=1 '--cpu-bind=cores' \\" in text
    assert "--rdzv-conf=timeout=300 '--tee=3' \"${TARGET[@]}\"" in text
    assert '"master_addr_ip": true' in text  # the job runtime looks the address up (slurmgen.job.rendezvous)


def test_the_summary_names_the_profile_file_it_applied(render_args, profile_dir):
    result = render_args("render", "--profile", "big")
    assert result.exit_code == 0, result.output
    assert f"profile [big] applied from {profile_dir / 'slurmgen.toml'}" in result.output.splitlines()
    result = render_args("render", "--no-preflight")
    assert f"profile [default] applied from {profile_dir / 'slurmgen.toml'}" in result.output.splitlines()


def test_a_profile_others_may_write_is_refused(render_args, profile_dir):
    path = profile_dir / "slurmgen.toml"
    path.chmod(0o666)
    result = render_args("render")
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == (
        f"slurmgen: error: {path}: writable by others (mode 0666): a profile's setup lines run in every job;"
        f" make it yours alone with: chmod go-w {path}")
    assert not (profile_dir / "generated.sh").exists()


def test_a_profile_owned_by_another_user_is_refused(render_args, profile_dir):
    import os
    import pwd

    if os.getuid() != 0:
        pytest.skip("only root can give a file to another user")  # CI and `make test` run as root
    path = profile_dir / "slurmgen.toml"
    os.chown(path, pwd.getpwnam("nobody").pw_uid, -1)
    result = render_args("render")
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == (
        f"slurmgen: error: {path}: owned by nobody, not by you: a profile's setup lines run in every job, so"
        " slurmgen uses only your own (copy it, or pass its options instead)")
    assert not (profile_dir / "generated.sh").exists()


def test_a_command_takes_from_a_profile_only_the_options_it_lists(render_args, profile_dir):
    """[default] applies to every command: fit, which lists no --env or --launcher, ignores them."""
    (profile_dir / "slurmgen.toml").write_text('[default]\nnodes = 4\ngpus = [1, 1, 2, 2]\nlauncher = "srun"\n'
                                               'mail-user = "me"\nenv = { HF_HOME = "/shared/hf" }\n')
    result = render_args("fit", "--gpu-mem", "80G")
    assert (result.exit_code, result.stderr) == (2, "slurmgen: error: give the model: slurmgen fit ... --"
                                                    " --model_name_or_path M\n")
    assert render_args("render").exit_code == 0
    assert "#SBATCH --mail-user=me" in script(profile_dir) and "srun" in script(profile_dir)
