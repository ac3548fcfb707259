//! The real accounting records in tests/fixtures/accounting/, headers
//! stripped, as files a user would import.

use std::path::{Path, PathBuf};

use hpc_ledger::ingest::{Format, ReadOptions};
use hpc_ledger::service::import::{Input, Summary, import};
use hpc_ledger::service::record::{RecordOptions, Recorder};

use crate::harness::TestDb;

pub const CENTER: &str = include_str!("../fixtures/fixtures-center.toml");

/// A fixture without its `#` source/license header, written to a file.
pub fn stripped(name: &str) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/accounting")
        .join(name);
    let text = std::fs::read_to_string(&src).unwrap();
    let body: String = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fixtures");
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join(format!("{}-{name}", std::process::id()));
    // Tests run concurrently and may strip the same fixture: write aside and
    // rename (atomic), so a reader never sees a half-written file.
    let partial = dir.join(format!(
        "{}-{name}.{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::write(&partial, body).unwrap();
    std::fs::rename(&partial, &out).unwrap();
    out
}

/// A fresh database with the fixtures' center configuration.
pub async fn fixture_db() -> TestDb {
    let db = TestDb::new().await;
    let config = hpc_ledger::config::parse(CENTER).unwrap();
    hpc_ledger::service::config::apply(&db.pool, &config, "test")
        .await
        .unwrap();
    db
}

/// How each fixture is read.
pub fn options(name: &str) -> (Format, ReadOptions) {
    let pbs = |cluster: &str| {
        (
            Format::Pbs,
            ReadOptions {
                cluster: Some(cluster.into()),
                project_from: Some(vec!["account".into(), "group".into()]),
                ..Default::default()
            },
        )
    };
    match name {
        "apel_slurm_sacct_parsable2.log" => (
            Format::Slurm,
            ReadOptions {
                cluster: Some("apel".into()),
                default_project: Some("gridpp".into()),
                fields: Some(
                    "JobID,JobName,User,Group,Start,End,Elapsed,CPUTimeRAW,Partition,NCPUS,NNodes,NodeList,MaxRSS,MaxVMSize,State"
                        .split(',')
                        .map(String::from)
                        .collect(),
                ),
                ..Default::default()
            },
        ),
        "hbjobinfo_habrok_sacct_snowman.txt" => (
            Format::Slurm,
            ReadOptions {
                cluster: Some("habrok".into()),
                default_project: Some("rug0001".into()),
                delimiter: Some("☃".into()),
                fields: Some(
                    "JobID,JobName,User,Partition,NodeList,NNodes,NCPUs,NTasks,State,Submit,Start,End,Timelimit,Elapsed,TotalCPU,CPUTime,UserCPU,SystemCPU,ReqMem,MaxRSS,MaxVMSize,ReqTRES,AllocTRES,TRESUsageInMax,TRESUsageInTot,TRESUsageOutTot,MaxDiskRead,MaxDiskWrite,MaxRSSNode,MaxRSSTask,MaxVMSizeNode,MaxVMSizeTask,MaxDiskReadNode,MaxDiskReadTask,MaxDiskWriteNode,MaxDiskWriteTask,Comment"
                        .split(',')
                        .map(String::from)
                        .collect(),
                ),
                ..Default::default()
            },
        ),
        "xdmod_pbs_torque_accounting_E.log" => pbs("edge"),
        "apel_torque_accounting_E.log" => pbs("ral"),
        "hnormalise_torque_accounting.log" => pbs("vsc"),
        "ncar_pbspro_casper_accounting.log"
        | "ncar_pbsparse_casper_records.log"
        | "ncar_qhist_casper_pbspro_2025.log" => pbs("casper"),
        "safe_fzk_torque_doubled_nodes.log" => pbs("fzk"),
        "safe_hector_cray_mppwidth.log" | "safe_pbs_no_resource_list.log" => pbs("hector"),
        "safe_oxford_sacct_parsable_allocgres.log" => (
            Format::Slurm,
            ReadOptions {
                cluster: Some("oxford".into()),
                ..Default::default()
            },
        ),
        "slurm_2205_lab_sacct.json" => (Format::SacctJson, ReadOptions::default()),
        "slurm_2205_lab_jobcomp_filetxt.log" | "slurm_2205_e2e_jobcomp_filetxt.log" => {
            (Format::JobcompFiletxt, ReadOptions::default())
        }
        "safe_cirrus_sacct_parsable.log" => (
            Format::Slurm,
            ReadOptions {
                cluster: Some("cirrus".into()),
                ..Default::default()
            },
        ),
        _ => (Format::Slurm, ReadOptions::default()),
    }
}

/// Import a fixture into `db` through the import service.
pub async fn import_fixture(db: &TestDb, name: &str, supersede: bool) -> Summary {
    let (format, options) = options(name);
    let mut recorder = Recorder::new(
        db.pool.clone(),
        RecordOptions {
            supersede,
            author: "tester".into(),
        },
    );
    let path = stripped(name);
    let mut summary = Summary::default();
    let file = std::fs::File::open(&path).unwrap();
    import(
        &mut recorder,
        file,
        &Input::new(name, format, &options),
        &mut summary,
        &|_| {},
    )
    .await
    .unwrap();
    summary
}
