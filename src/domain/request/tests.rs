//! Resource requests as users write them.

use super::*;
use crate::domain::units::{GIB, MIB};

fn pbs_shape(s: &str, cpn: u32) -> JobShape {
    parse_pbs(s).unwrap().shape(cpn).unwrap()
}

fn slurm_shape(s: &str, cpn: u32) -> JobShape {
    parse_slurm(s).unwrap().shape(cpn).unwrap()
}

fn js(nodes: u32, cores: u32, memory: Option<u64>, gpus: u32) -> JobShape {
    JobShape {
        nodes,
        cores,
        memory: memory.map(Bytes),
        gpus,
    }
}

#[test]
fn pbs_torque_requests() {
    let cases = [
        ("nodes=1:ppn=3", js(1, 3, None, 0)),
        ("nodes=1:ppn=1,mem=12GB", js(1, 1, Some(12 * GIB), 0)),
        ("nodes=1:ppn=8:gpus=2", js(1, 8, None, 2)),
        ("nodes=4:ppn=8", js(4, 32, None, 0)),
        ("nodes=2:ppn=4:gpus=1", js(2, 8, None, 2)),
        (
            "nodes=1:ppn=4:avx,mem=1993mb,walltime=24:00:00",
            js(1, 4, Some(1993 * MIB), 0),
        ),
        ("nodes=1", js(1, 1, None, 0)),
        ("nodes=n1:ppn=2+n2:ppn=2", js(2, 4, None, 0)),
        ("nodes=2:ppn=2+1:ppn=4", js(3, 8, None, 0)),
        ("nodes=1:ppn=2,pmem=2000mb", js(1, 2, Some(4000 * MIB), 0)),
        ("nodes=1:ppn=2,pmem=1gb,mem=4gb", js(1, 2, Some(4 * GIB), 0)),
        ("nodes=1:ppn=2,pmem=4gb,mem=4gb", js(1, 2, Some(8 * GIB), 0)),
        ("ncpus=4,mem=1024", js(1, 4, Some(1024), 0)),
    ];
    for (s, want) in cases {
        assert_eq!(pbs_shape(s, 28), want, "{s}");
    }
    assert_eq!(
        parse_pbs("nodes=1:ppn=1,walltime=2:00:00").unwrap().walltime,
        Some(7200)
    );
}

#[test]
fn pbs_pro_select_requests() {
    let cases = [
        ("select=1:ncpus=1:ngpus=1:mem=10gb", js(1, 1, Some(10 * GIB), 1)),
        ("select=2:ncpus=8:mem=16gb+1:ncpus=4", js(3, 20, Some(32 * GIB), 0)),
        ("select=4:ncpus=2,place=pack", js(1, 8, None, 0)),
        ("select=2:ncpus=36:mpiprocs=36,place=scatter:excl", js(2, 72, None, 0)),
        (
            "select=1:ncpus=1:mem=4GB:ompthreads=1,mem=4gb,ncpus=1,ngpus=0",
            js(1, 1, Some(4 * GIB), 0),
        ),
    ];
    for (s, want) in cases {
        assert_eq!(pbs_shape(s, 36), want, "{s}");
    }
    // Exclusive placement takes whole nodes.
    assert_eq!(pbs_shape("select=2:ncpus=4,place=scatter:excl", 36), js(2, 72, None, 0));
}

#[test]
fn slurm_option_requests() {
    let cases = [
        ("-n 4", js(1, 4, None, 0)),
        ("-n4 -c2", js(1, 8, None, 0)),
        ("-N 2 -n 8 --mem=32G", js(2, 8, Some(64 * GIB), 0)),
        (
            "--ntasks=2 --cpus-per-task=3 --mem-per-cpu=4G",
            js(1, 6, Some(24 * GIB), 0),
        ),
        ("-N 2 --ntasks-per-node=4", js(2, 8, None, 0)),
        // Slurm spreads 8 tasks 2 a node over 4 nodes (charged whole, R3).
        ("-n 8 --ntasks-per-node=2", js(4, 8, None, 0)),
        ("-n 7 --ntasks-per-node 2 -c 2", js(4, 14, None, 0)),
        ("-n 4 --ntasks-per-node=8", js(1, 4, None, 0)),
        // At least that many: 40 cores do not fit on one node of 28.
        ("-n 40 --ntasks-per-node=40", js(2, 40, None, 0)),
        ("-n 4 --ntasks-per-node=2 -c 20", js(3, 80, None, 0)),
        ("-n 1 --mem=12000", js(1, 1, Some(12000 * MIB), 0)),
        ("-n 8 --gres=gpu:2", js(1, 8, None, 2)),
        ("-N 2 -n 8 --gres=gpu:v100:2", js(2, 8, None, 4)),
        ("-N 2 -n 8 --gpus=3", js(2, 8, None, 3)),
        (
            "-n 2 --gpus-per-node=a100:1 --mem-per-gpu=10G",
            js(1, 2, Some(10 * GIB), 1),
        ),
        ("-n 64", js(3, 64, None, 0)),
        ("-N 1 --exclusive", js(1, 28, None, 0)),
        ("-n 1 --mem=0", js(1, 28, None, 0)),
        ("-p batch -A proj -n 2 -t 1-00:00:00", js(1, 2, None, 0)),
    ];
    for (s, want) in cases {
        assert_eq!(slurm_shape(s, 28), want, "{s}");
    }
    assert_eq!(parse_slurm("-n 1 -t 90").unwrap().walltime, Some(5400));
}

#[test]
fn alloc_tres_is_what_a_slurm_job_held() {
    assert_eq!(
        parse_alloc_tres("billing=64,cpu=64,mem=62.50G,node=8").unwrap(),
        AllocTres {
            cores: 64,
            memory: Some(Bytes(67_108_864_000)),
            nodes: Some(8),
            gpus: None
        }
    );
    assert_eq!(
        parse_alloc_tres("billing=12,cpu=12,gres/gpu=2,mem=31000M,node=1").unwrap(),
        AllocTres {
            cores: 12,
            memory: Some(Bytes(31000 * MIB)),
            nodes: Some(1),
            gpus: Some(2)
        }
    );
    assert_eq!(
        parse_alloc_tres("cpu=2,gres/gpu:v100=1,gres/gpu:a100=2").unwrap().gpus,
        Some(3)
    );
    assert_eq!(
        parse_alloc_tres("cpu=2,gres/gpu=2,gres/gpu:v100=2").unwrap().gpus,
        Some(2)
    );
    assert!(
        parse_alloc_tres("mem=1G,node=1")
            .unwrap_err()
            .to_string()
            .contains("no cpu count")
    );
    assert!(
        parse_alloc_tres("cpu=x")
            .unwrap_err()
            .to_string()
            .contains("cpu must be a whole number")
    );
}

#[test]
fn durations() {
    for (s, secs) in [
        ("2:00:00", 7200),
        ("96:00:00", 345_600),
        ("3600", 3600),
        ("1:02:03:04", 93784),
        ("19:23:4", 69784),
    ] {
        assert_eq!(pbs_duration(s), Ok(secs), "{s}");
    }
    for (s, secs) in [
        ("00:00:02", 2),
        ("1-02:24:13", 95053),
        ("10-13:27:06", 912_426),
        ("90", 5400),
        ("05:30", 330),
        ("2-12", 216_000),
        ("1-00:30", 88200),
    ] {
        assert_eq!(slurm_duration(s), Ok(secs), "{s}");
    }
    assert!(pbs_duration("1:xx:00").is_err());
    assert!(slurm_duration("UNLIMITED").is_err());
    assert!(slurm_duration("1-2:3:4:5").is_err());
}

#[test]
fn bad_requests_say_what_is_wrong() {
    let e = |s: &str| parse_pbs(s).unwrap_err().to_string();
    assert_eq!(
        e("nodes=1:ppn=x"),
        "ppn must be a whole number, not \"x\" (in \"nodes=1:ppn=x\")"
    );
    assert!(e("nodes=1:ppn=1,memory=12GB").contains("unknown resource \"memory\""));
    assert!(e("nodes=1:ppn=1,mem=12XB").contains("unknown size unit"));
    assert!(e("nodes=0:ppn=4").contains("asks for no nodes"));
    assert!(e("nodes=1,select=1:ncpus=2").contains("either nodes= or select="));
    assert!(e("ppn").contains("not of the form resource=value"));
    assert!(e("nodes=1:ppn=0").contains("holds no cores"));
    let e = |s: &str| parse_slurm(s).unwrap_err().to_string();
    assert!(e("-N 2-4").contains("node range"));
    assert!(e("--mem").contains("--mem needs a value"));
    assert!(e("--frobnicate=1").contains("unknown option \"--frobnicate\""));
    assert!(e("--gres=gpu:a:b:c").contains("gpu[:type]:count"));
    // Found by the fuzzer: a short option made of a multi-byte character.
    assert!(e("-éc").contains("unknown option \"-é\""));
}

#[test]
fn gres_strings_give_gpu_counts() {
    // Forms from sacct's AllocGRES/ReqGRES (Open XDMoD's shredder fixtures,
    // an Oxford cluster's sacct in SAFE-ACCOUNTING's test data).
    let cases: [(&str, Option<u32>); 12] = [
        ("gpu:2", Some(2)),
        ("gpu:k80:2", Some(2)),
        ("gpu:2(IDX:0-1)", Some(2)),
        ("gpu:P100:2(IDX:1,3)", Some(2)),
        ("gpu:0(IDX:N/A)", Some(0)),
        ("hbm:0,gpu:4,bandwidth:4G", Some(4)),
        ("gpu:k80:1,gpu:p100:2", Some(3)),
        ("gpu", Some(1)),
        ("gpu:tesla", Some(1)),
        ("gres/gpu:3", Some(3)),
        ("mic:2", None),
        ("", None),
    ];
    for (input, want) in cases {
        assert_eq!(parse_gres_gpus(input), Ok(want), "{input}");
    }
    assert!(parse_gres_gpus("gpu:a:b:c").is_err());
    assert!(parse_gres_gpus("gpu:4294967295,gpu:1").is_err());
}
