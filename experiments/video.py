"""``bpo evaluate RUN --video FILE``: episodes of a saved policy rendered headless to a video.

The episodes run in Gymnasium (``render_mode="rgb_array"``) with the policy loaded by
``bpo.training.policies.load_policy``; on the MuJoCo tasks Gymnasium's dynamics are those of every
backend but MJX (``tests/test_mujoco_threads.py``). MuJoCo renders offscreen through EGL, or
OSMesa where ``MUJOCO_GL=osmesa`` is set: no display is needed. The classic-control tasks render
with pygame (``pip install pygame``). ``.gif`` is written with Pillow (installed with matplotlib);
``.mp4`` needs the ``video`` extra (``pip install -e ".[video]"``: imageio-ffmpeg, about 70 MB).
"""

from __future__ import annotations

import io
import os
import tempfile
import time
from pathlib import Path

import gymnasium as gym
import imageio.v3 as iio
import numpy as np

from bpo.config.schema import ConfigError
from bpo.infra.results import atomic_write_bytes
from bpo.training.policies import load_policies, load_policy
from envs.gymnasium_envs import MUJOCO_ENVS

FORMATS = (".gif", ".mp4")


def check_video(path: Path, env_id: str, episodes: int = 1, max_frames: int = 1) -> None:
    """Before any work: a file (not a folder) in a format this machine can write, at least one
    episode and one frame, and a renderer for the task."""
    if episodes < 1:
        raise ConfigError("video_episodes", f"must be an integer >= 1, got {episodes}")
    if max_frames < 1:
        raise ConfigError("video_frames", f"must be an integer >= 1, got {max_frames}")
    if Path(path).is_dir():
        raise ConfigError("video", f"{str(path)!r} is a folder; allowed: a file name ending in one of {list(FORMATS)}")
    if Path(path).suffix not in FORMATS:
        raise ConfigError("video", f"{str(path)!r}: allowed file types: {list(FORMATS)}")
    if Path(path).suffix == ".mp4":
        try:
            import imageio_ffmpeg  # noqa: F401 -- only its presence is checked here
        except ImportError:
            raise ConfigError("video", "writing .mp4 needs imageio-ffmpeg: pip install -e \".[video]\"; or give a "
                                       ".gif file") from None
    if env_id not in MUJOCO_ENVS:
        try:
            import pygame  # noqa: F401 -- Gymnasium's classic-control renderer
        except ImportError:
            raise ConfigError("video", f"Gymnasium renders {env_id} with pygame: pip install -e \".[video]\"") from None


def render_episodes(run_dir: Path, seed: int = 0, which: str = "pi", deterministic: bool = True, episodes: int = 1,
                    max_frames: int = 1000, size: tuple[int, int] = (480, 320), env_seed: int = 0
                    ) -> tuple[list[np.ndarray], list[float]]:
    """Frames (H x W x 3 uint8) of ``episodes`` episodes of one seed's policy, and their returns."""
    os.environ.setdefault("MUJOCO_GL", "egl")  # read when Gymnasium builds its offscreen renderer
    # Gymnasium's classic-control renderer starts all of pygame, its audio too: without a sound card
    # ALSA prints eight error lines. A video needs no audio (a user's own setting is kept).
    os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
    # Frames are drawn off screen; without a display SDL's window driver printed an error line
    # (XDG_RUNTIME_DIR) before an unchanged video.
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    env_id = load_policies(run_dir).config.env
    act = load_policy(run_dir, seed=seed, which=which, deterministic=deterministic)
    try:
        env = gym.make(env_id, render_mode="rgb_array", width=size[0], height=size[1])
    except TypeError:  # classic control takes no size
        env = gym.make(env_id, render_mode="rgb_array")
    frames, returns = [], []
    try:
        for episode in range(episodes):
            obs, _ = env.reset(seed=env_seed + episode)
            frames.append(env.render())
            total, done = 0.0, False
            while not done and len(frames) < max_frames:
                action = act(obs)
                obs, reward, terminated, truncated, _ = env.step(action if action.shape else action.item())
                frames.append(env.render())
                total, done = total + float(reward), terminated or truncated
            returns.append(total)
    finally:
        env.close()  # frees the GL context now, not at interpreter exit (EGL complains then)
    return frames, returns


def encode(frames: list[np.ndarray], path: Path, fps: int) -> int:
    """Write the frames to ``path`` (.gif or .mp4, H.264) atomically; its size in bytes."""
    if Path(path).suffix == ".gif":
        buffer = io.BytesIO()
        iio.imwrite(buffer, np.stack(frames), extension=".gif", duration=1000 / fps, loop=0)
        data = buffer.getvalue()
    else:
        import imageio_ffmpeg  # an optional extra (check_video said so before any work)

        height, width = frames[0].shape[:2]
        with tempfile.NamedTemporaryFile(suffix=".mp4") as tmp:
            writer = imageio_ffmpeg.write_frames(tmp.name, (width, height), fps=fps, macro_block_size=1,
                                                 output_params=["-pix_fmt", "yuv420p"])
            writer.send(None)
            for frame in frames:
                writer.send(np.ascontiguousarray(frame))
            writer.close()
            data = Path(tmp.name).read_bytes()
    atomic_write_bytes(Path(path), data)
    return len(data)


def record_video(run_dir: Path, path: Path, fps: int = 30, **kwargs) -> dict:
    """Render and write a video; what it holds and what it cost."""
    start = time.perf_counter()
    frames, returns = render_episodes(run_dir, **kwargs)
    rendered = time.perf_counter() - start
    size = encode(frames, path, fps)
    return {"video": str(path), "frames": len(frames), "returns": returns, "bytes": size,
            "render_s": rendered, "total_s": time.perf_counter() - start}
